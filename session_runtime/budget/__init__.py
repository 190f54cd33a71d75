"""The session's side of tenant budgets: :mod:`.guard`, the guard (``check_before_llm``
reserves, ``record_after_llm`` settles) that consults the operator's budget service
(``berth_operator.budget``, over HTTP: :mod:`berth_contract.services`) under the policy's
failure policy.
"""
