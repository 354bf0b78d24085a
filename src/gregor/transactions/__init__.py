"""The transaction coordinator and its state on ``__transaction_state``."""
