"""Thin kopf handlers, named ``<kind>_<event>``: read, call a pure decision, apply the plan.

Importing ``berth_operator.handlers.agentsession`` registers the AgentSession handlers with kopf.
"""
