"""The only package that calls the Kubernetes API (import-linter contract).

- ``connection``    credentials (kopf's) and ``ApiSession``, the operator's aiohttp session.
- ``paths``         API paths, media types and query values (pure; the kubectl plugin's too).
- ``rest``          ``AsyncRest``: the operator's requests by path (re-exports ``paths``).
- ``client``        ``KubeClient``: typed async calls of the operator (sessions, pods, nodes,
                    claims, Jobs, Leases, LaneWorkers).
- ``lease``         ``LeaderElector``: a coordination.k8s.io Lease so one of two replicas is active.

Error answers become ``berth_operator.errors`` here (``calls``; the kubectl plugin,
``kubectl_berth``, reads its own through it too).
"""
