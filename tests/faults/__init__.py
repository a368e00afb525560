"""The test cloud under faults (issue 50; ``make test-cloud-faults``)."""
