"""What every log line of rtagent carries: the RPC caller's request id
(:mod:`.context`) and no raw control characters (:mod:`.escape`)."""
