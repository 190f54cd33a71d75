"""Hosting a3s-code-core 9.x sessions: Berth's own binding, writer-lease parity, checkpoints.

The A3S Code 9.x Python SDK cannot be installed here; its Rust core (``a3s-code-core``) can be
built from the crate registry. ``a3s_core_binding/`` is Berth's PyO3 binding over it (module
``berth_a3s_core``, built and cached by ``hack/a3s-core-binding.sh``). This package is what
Berth builds on it (docs/a3s-compatibility.md, "a3s-code-core 9.x"):

- :mod:`.binding`: the binding's values as Python objects; a session whose surface is the one
  ``session_runtime.a3s_bridge.A3sBridge`` serves (its external tasks then run on LaneWorkers);
- :mod:`.lease`: one epoch space for a3s-code-core's store writer lease and Berth's placement
  epochs, so each side fences the other;
- :mod:`.checkpoint`: ``SessionCheckpointExportV1`` to and from Berth's session store.
"""
