"""The service around an agent: the process ``rtagent run`` starts.

The audit loop (:mod:`.periodic`), what signals ask for (:mod:`.wakeup`),
systemd's notify protocol, the health and metrics endpoint, the Guru
Meditation Report, and the builder that assembles an agent from
configuration (the one place that reads it). Everything below this
package receives plain values.
"""
