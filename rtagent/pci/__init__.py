"""PCI passthrough and SR-IOV: device specs and aliases from config
(:mod:`.spec`, :mod:`.alias`), the devices the host has (:mod:`.model`),
their states and owners (:mod:`.devices`), and pools that requests are
matched against (:mod:`.pools`). Pure values and functions, no I/O.
"""
