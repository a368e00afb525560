"""The RPC edge: a versioned oslo.messaging endpoint over the trackers, its
validation and error contract (docs/rpc-api.md), and notifications."""
