"""Pure decisions of the operator: observations in, plans out; no I/O, no kopf, no kubernetes.

- ``observe``      parse Pod and Node bodies into small frozen observations.
- ``replacement``  the one function that says why a session pod must be replaced (or not).
- ``session``      ``decide(observation) -> Plan``: status, pods to delete, pod to create.

Called by ``berth_operator.handlers.agentsession``; tested as tables in tests/unit/operator.
"""
