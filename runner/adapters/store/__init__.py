"""The run state in git: one state ref per plan, an append-only ledger."""
