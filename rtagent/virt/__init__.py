"""Host drivers: what the hypervisor has and runs, read without side effects."""
