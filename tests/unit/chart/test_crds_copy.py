"""charts/berth/crds/ is a checked copy of crds/ (the generated source of truth).

Helm installs CRDs only from a chart's own crds/ directory, so the chart carries a copy; this
test fails as soon as `make crds` changes crds/ without the copy following
(cp crds/*.yaml charts/berth/crds/).
"""

from __future__ import annotations

from tests.unit.chart.helm import CHART, ROOT


def test_chart_crds_equal_generated_crds() -> None:
    source = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    copy = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert source, "crds/ is empty"
    assert sorted(copy) == sorted(source), "charts/berth/crds/ has other files than crds/"
    stale = [name for name in source if copy[name] != source[name]]
    assert not stale, f"charts/berth/crds/ is stale for {stale}: cp crds/*.yaml charts/berth/crds/"


def test_crds_are_not_templated() -> None:
    """Files in crds/ are applied verbatim by helm: no template syntax may hide in them."""
    for path in (CHART / "crds").glob("*.yaml"):
        assert "{{" not in path.read_text(), path.name
