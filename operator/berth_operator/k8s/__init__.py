"""The only package that calls the Kubernetes API (import-linter contract).

- ``rest``          requests by path over the ``kubernetes`` client's ``ApiClient`` (auth, TLS,
                    pool); the generated API classes are never built.
- ``client``        ``KubeClient``: typed async calls of the operator (sessions, pods, nodes,
                    claims, Jobs, Leases, LaneWorkers).
- ``lease``         ``LeaderElector``: a coordination.k8s.io Lease so one of two replicas is active.
- ``plugin_client`` reads of the kubectl-berth plugin.

``kubernetes.client.ApiException`` is translated to ``berth_operator.errors`` here.
"""
