"""Guest NUMA placement: which host cell takes each guest cell, which host
CPUs a dedicated guest's vCPUs are pinned to, which page size backs its
memory. Pure values and functions, no I/O (:mod:`.model`, :mod:`.fit`).
"""
