"""The session front door: messages for sessions by ``namespace/name``, kept durably in Redis,
delivered in order and exactly once to the session's pod (waking a session at rest first), and
peer calls between sessions. Runs in the operator's leader (``berth_operator.main``)."""
