"""The only package that calls the Kubernetes API (import-linter contract).

- ``client``        ``KubeClient``: typed async wrappers over the ``kubernetes`` client used by the
                    operator (sessions, pods, nodes, ConfigMaps, Jobs, LaneWorkers).
- ``lease``         ``LeaderElector``: a coordination.k8s.io Lease so one of two replicas is active.
- ``plugin_client`` reads of the kubectl-berth plugin.

``kubernetes.client.ApiException`` is translated to ``berth_operator.errors`` here.
"""
