# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Loopback ports for servers that are told their port before they bind it.

A server that binds port 0 itself (our Placement server) needs none of
this. One that must be given a port (epmd, RabbitMQ, PostgreSQL, the
agent's health endpoint) is given one that was free when it was chosen;
until the server binds it, anything else may take it. The kernel hands out
ports of its ephemeral range (``net.ipv4.ip_local_port_range``) to every
outgoing connection and to every bind of port 0, so a port chosen there is
taken back within a second when another test run on the same machine opens
connections by the thousand (seen: ``make test`` beside ``make test``,
epmd refused its port). Chosen here: a random port below that range,
which only another explicit choice can take, and free when it is returned.
"""

from __future__ import annotations

import os
import random
import socket

# Below the ephemeral range and above the common services' ports
# (PostgreSQL's 5432, RabbitMQ's 5672); one that listens in between
# (libvirtd's 16509) fails the bind check.
LOWEST = 10000
_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_TRIES = 500


class NoFreePort(RuntimeError):
    """No free loopback port was found below the ephemeral range."""


def ephemeral_range(path=_RANGE_FILE):
    """The kernel's (first, last) ephemeral port; Linux's default if unread."""
    try:
        with open(path, encoding="ascii") as f:
            first, last = (int(word) for word in f.read().split())
    except (OSError, ValueError):
        return 32768, 60999
    return first, last


def is_free(port):
    """Whether a TCP listener could bind 127.0.0.1:``port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(offset=0):
    """A free loopback port P below the ephemeral range; P + ``offset`` is
    free and below it too (RabbitMQ's distribution port is its AMQP port +
    20000).

    :raises NoFreePort: none found in a few hundred random tries.
    """
    first, _ = ephemeral_range()
    highest = first - 1 - offset
    if highest < LOWEST:
        raise NoFreePort(f"no room below the ephemeral range (from {first}) for offset {offset}")
    for _ in range(_TRIES):
        port = random.randint(LOWEST, highest)
        if is_free(port) and (offset == 0 or is_free(port + offset)):
            return port
    raise NoFreePort(f"no free loopback port in {LOWEST}..{highest} after {_TRIES} tries")


def listens(pid, port):
    """Whether process ``pid`` itself listens on TCP 127.0.0.1:``port``.

    "The port is taken" does not say by whom: a server that lost its port
    to another process exits, but maybe not before a caller sees the port
    taken and takes it for the server's. Read from /proc (Linux).
    """
    inodes = set()
    try:
        with open("/proc/net/tcp", encoding="ascii") as f:
            next(f)
            for line in f:
                fields = line.split()
                # local address as hex IP:PORT; state 0A is LISTEN
                if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
                    inodes.add(f"socket:[{fields[9]}]")
        fd_dir = f"/proc/{pid}/fd"
        for fd in os.listdir(fd_dir):
            try:
                if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False
