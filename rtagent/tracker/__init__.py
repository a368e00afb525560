"""The node's resource truth: model, pure ledger, claims, durable store, and
the tracker that is their only writer."""
