"""The crash campaign: randomized, seeded scenarios that prove Berth's promise "a side-effecting
tool never runs twice and no tool result is lost" across crashes, passivation, lost workers,
Redis failures, clock skew, a slow or full volume and a failing model endpoint.

Run ``python -m tests.chaos`` (or ``make chaos``). Modules, one job each: :mod:`.scenario`
(scenarios from seeds), :mod:`.ledger` (where tools record their side effects, outside the system
under test), :mod:`.model` (the scripted model endpoint with injected failures), :mod:`.child`
(the zygote forking session and worker processes, and the in-process faults), :mod:`.infra`
(zygote client, private redis-server), :mod:`.runner` (attempts, faults, resume),
:mod:`.invariants` (what must hold), :mod:`.report` (the report). See ``docs/chaos.md``.
"""
