"""Pure helpers of the test-only process node agent (``hack/process_node_agent.py``).

TEST-ONLY infrastructure for the dev cluster: nothing in Berth's shipped packages imports this.
The agent plays kubelet for the "process" nodes of the dev cluster and runs their pods as local
processes. The modules here hold the parts that are pure functions of their inputs (apart from
small, explicit file I/O in ``volumes``) so they can be tested as tables:

- ``paths``   container path -> host path mapping and prefix substitution in strings
- ``env``     container environment resolution and kubelet's ``$(VAR)`` expansion
- ``status``  Pod status / Node object and condition builders
- ``ipam``    pod IP allocation from a loopback prefix
- ``volumes`` ConfigMap / Secret / projected volume file lists
"""
