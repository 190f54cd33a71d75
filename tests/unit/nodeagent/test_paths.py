"""Container path -> host path mapping of the process node agent (hack/nodeagent/paths.py)."""

from __future__ import annotations

from typing import Any

import pytest

from hack.nodeagent import paths

MAP = paths.PathMap(
    {
        "/data": "/h/pvc/ns/claim",
        "/data/store": "/h/pod/store",
        "/etc/berth/": "/h/pod/volumes/cfg",
        "/dev/termination-log": "/h/pod/termination-log",
        "/": "/ignored-root",
    }
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/data", "/h/pvc/ns/claim"),
        ("/data/x/y", "/h/pvc/ns/claim/x/y"),
        ("/data/store/j", "/h/pod/store/j"),  # longest prefix wins
        ("/data/storex", "/h/pvc/ns/claim/storex"),  # component boundary
        ("/database", "/database"),
        ("/data.txt", "/data.txt"),
        ("/srv/data", "/srv/data"),  # not a prefix inside another path
        ("--store=/data/store", "--store=/h/pod/store"),
        ("a:/data:/etc/berth/opts.json", "a:/h/pvc/ns/claim:/h/pod/volumes/cfg/opts.json"),
        ("echo hi > /dev/termination-log; exit 3", "echo hi > /h/pod/termination-log; exit 3"),
        ("file:///data/x", "file:///h/pvc/ns/claim/x"),
        ("'/data/store'", "'/h/pod/store'"),
        ("no paths here", "no paths here"),
        ("/usr/bin/env", "/usr/bin/env"),  # "/" is never mapped
    ],
)
def test_substitute(text: str, expected: str) -> None:
    assert MAP.substitute(text) == expected


def test_substitute_is_one_pass() -> None:
    # A host path that itself contains a container prefix is not rewritten again.
    m = paths.PathMap({"/a": "/x/a", "/x": "/never"})
    assert m.substitute("/a/b") == "/x/a/b"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/data", "/h/pvc/ns/claim"),
        ("/data/", "/h/pvc/ns/claim"),
        ("/data/store/a", "/h/pod/store/a"),
        ("/etc/berth/opts.json", "/h/pod/volumes/cfg/opts.json"),
        ("/etc/other", None),
        ("/databases", None),
    ],
)
def test_map_path(path: str, expected: str | None) -> None:
    assert MAP.map_path(path) == expected


POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns1"},
    "spec": {
        "volumes": [
            {"name": "shared", "persistentVolumeClaim": {"claimName": "berth-shared"}},
            {"name": "cfg", "configMap": {"name": "opts"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "host", "hostPath": {"path": "/var/lib/x"}},
        ]
    },
}


def test_volume_host_paths() -> None:
    assert paths.volume_host_paths(POD, "/s/pods/ns1_p/uid", "/s/pvc") == {
        "shared": ("persistentVolumeClaim", "/s/pvc/ns1/berth-shared"),
        "cfg": ("configMap", "/s/pods/ns1_p/uid/volumes/cfg"),
        "scratch": ("emptyDir", "/s/pods/ns1_p/uid/volumes/scratch"),
        "host": ("hostPath", "/var/lib/x"),
    }


@pytest.mark.parametrize(
    ("mount", "expected_host"),
    [
        ({"name": "shared", "mountPath": "/data"}, "/s/pvc/ns1/berth-shared"),
        (
            {"name": "shared", "mountPath": "/ws", "subPath": "workspaces/ns1/s"},
            "/s/pvc/ns1/berth-shared/workspaces/ns1/s",
        ),
        ({"name": "cfg", "mountPath": "/etc/berth/", "readOnly": True}, "/v/cfg"),
        ({"name": "missing", "mountPath": "/x"}, None),
    ],
)
def test_container_mounts(mount: dict[str, Any], expected_host: str | None) -> None:
    vols = {
        "shared": ("persistentVolumeClaim", "/s/pvc/ns1/berth-shared"),
        "cfg": ("configMap", "/v/cfg"),
    }
    mounts = paths.container_mounts({"volumeMounts": [mount]}, vols)
    if expected_host is None:
        assert mounts == []
    else:
        assert [m.host_path for m in mounts] == [expected_host]
        assert mounts[0].container_path == mount["mountPath"].rstrip("/")


@pytest.mark.parametrize(
    ("container", "path"),
    [
        ({}, "/dev/termination-log"),
        ({"terminationMessagePath": "/tmp/msg"}, "/tmp/msg"),
    ],
)
def test_build_path_map_includes_termination_log(container: dict[str, Any], path: str) -> None:
    pm = paths.build_path_map(container, [], "/pod/termination-log")
    assert pm.map_path(path) == "/pod/termination-log"
