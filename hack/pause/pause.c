/* The pod sandbox ("pause") process of the dev cluster's nodes.
 *
 * containerd's CRI starts one per pod to hold its namespaces. No image registry is reachable here,
 * so hack/image.sh builds this as a static binary and imports it as a one-layer image that the
 * nodes' containerd use as `sandbox_image`. Like the upstream pause: PID 1 of the pod's PID
 * namespace (when shared), it waits for signals, reaps children and exits on SIGINT/SIGTERM.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction term = {.sa_handler = on_term};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &term, NULL) < 0 || sigaction(SIGTERM, &term, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("sigaction");
    return 1;
  }
  for (;;) {
    pause();
  }
}
