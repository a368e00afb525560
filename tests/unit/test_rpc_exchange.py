"""The exchange a conductor must name (docs/rpc-api.md) is the one the
agent's server listens on whatever control_exchange says, and the sample
config shows rtagent's default for control_exchange, not oslo.messaging's."""

import os

from rtagent import conf as rtconf
from rtagent.rpc import transport

SAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "..", "etc", "rtagent", "rtagent.conf.sample"
)


def test_the_server_target_names_the_exchange():
    target = transport.server_target("compute-1")
    assert (target.exchange, target.topic, target.server) == ("rtagent", "rtagent", "compute-1")
    assert target.version == transport.API_VERSION


def test_the_agent_default_control_exchange_is_the_one_the_sample_shows():
    conf = rtconf.new_conf()
    transport.register_opts(conf)
    conf([], project="rtagent", default_config_files=[])
    with open(SAMPLE, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert f"#control_exchange = {conf.control_exchange}" in lines
    assert conf.control_exchange == transport.EXCHANGE
