"""The only package that calls the Kubernetes API (import-linter contract).

- ``connection``    credentials (kopf's) and ``ApiSession``, the operator's aiohttp session.
- ``paths``         API paths, media types and query values (pure; the plugin's too).
- ``rest``          ``AsyncRest``: the operator's requests by path (re-exports ``paths``).
- ``sync_rest``     the plugin's synchronous requests over the ``kubernetes`` client.
- ``client``        ``KubeClient``: typed async calls of the operator (sessions, pods, nodes,
                    claims, Jobs, Leases, LaneWorkers).
- ``lease``         ``LeaderElector``: a coordination.k8s.io Lease so one of two replicas is active.
- ``plugin_client`` reads of the kubectl-berth plugin.

Error answers become ``berth_operator.errors`` here (``calls``).
"""
