// Berth's live pages: the server re-renders a page's parts and sends each changed one as a
// server-sent event {"id": element id, "html": its new content, "at": send time in ms}; this
// swaps it in. Written for this view (kubectl_berth/ui/app.py), no library.
(function () {
  "use strict";
  var url = document.body.getAttribute("data-live");
  if (!url || !window.EventSource) {
    return;
  }
  var source = new EventSource(url);
  source.onmessage = function (message) {
    var part = JSON.parse(message.data);
    var element = document.getElementById(part.id);
    if (element) {
      element.innerHTML = part.html;
    }
    document.body.setAttribute("data-updated", String(part.at));
    document.body.setAttribute("data-live-state", "open");
  };
  source.onerror = function () {
    document.body.setAttribute("data-live-state", "reconnecting");
  };
})();
