"""Provider config files merged into what the agent publishes (real Placement)."""

import pytest

from rtagent.placement import provider_config as pc
from rtagent.placement.desired import desired_tree
from tests.functional.conftest import Recorder
from tests.functional.placement.conftest import get

pytestmark = pytest.mark.functional

CONFIG = """
meta:
  schema_version: '1.0'
providers:
  - identification:
      uuid: $COMPUTE_NODE
    inventories:
      additional:
        - CUSTOM_FPGA: {total: 4, reserved: 1}
    traits:
      additional: [CUSTOM_RACK_12, CUSTOM_LOW_LATENCY]
"""


def publish(agent, source):
    """What the agent's audit does, with the provider configs merged in."""
    agent.audit()
    snapshot = agent.tracker.snapshot()
    return agent.sync.sync(source.apply(desired_tree(snapshot)))


def test_configs_are_published_reloaded_and_bad_files_keep_the_last_good(
    make_agent, operator, tmp_path
):
    confdir = tmp_path / "provider_config"
    confdir.mkdir()
    (confdir / "node.yaml").write_text(CONFIG)
    source = pc.ProviderConfigSource(str(confdir), pc.load(str(confdir)))
    recorder = Recorder()
    agent = make_agent(observer=recorder)
    root = agent.tracker.node_uuid
    publish(agent, source)
    traits = set(get(operator, f"/resource_providers/{root}/traits")["traits"])
    assert {"CUSTOM_RACK_12", "CUSTOM_LOW_LATENCY", "OWNER_NOVA"} <= traits
    fpga = get(operator, f"/resource_providers/{root}/inventories")["inventories"]["CUSTOM_FPGA"]
    assert (fpga["total"], fpga["reserved"], fpga["allocation_ratio"]) == (4, 1, 1.0)

    # steady state with configs: still one read (after the agent's one look
    # for unknown consumers that our publish's writes caused)
    publish(agent, source)
    recorder.reset()
    assert publish(agent, source).operations == ()
    assert recorder.count() == 1 + 1  # the agent's own audit + our publish

    # SIGHUP with a broken file: the last good configuration stays in force
    (confdir / "node.yaml").write_text("meta: {schema_version: '1.0'}\nproviders: [{}]")
    assert source.reload() is False
    assert publish(agent, source).operations == ()

    # SIGHUP with a trait dropped: we remove what we put there, nothing else
    operator.put("/traits/CUSTOM_OPERATOR")
    gen = get(operator, f"/resource_providers/{root}")["generation"]
    operator.put(
        f"/resource_providers/{root}/traits",
        json={"resource_provider_generation": gen, "traits": sorted(traits | {"CUSTOM_OPERATOR"})},
    )
    (confdir / "node.yaml").write_text(CONFIG.replace(", CUSTOM_LOW_LATENCY", ""))
    assert source.reload() is True
    publish(agent, source)
    after = set(get(operator, f"/resource_providers/{root}/traits")["traits"])
    assert "CUSTOM_LOW_LATENCY" not in after
    assert {"CUSTOM_RACK_12", "CUSTOM_OPERATOR", "COMPUTE_NODE"} <= after


SAME_NAME = """
meta:
  schema_version: '1.0'
providers:
  - identification:
      uuid: $COMPUTE_NODE
    inventories:
      additional:
        - CUSTOM_FAKE_HOST: {total: 100}
    traits:
      additional: [CUSTOM_FAKE_HOST]
"""


def test_one_name_as_a_trait_and_a_resource_class(make_agent, operator, tmp_path):
    # nova's own provider-config tests name one custom trait and one custom
    # class alike: Placement keeps the two namespaces apart, so must we
    # (issue 31: one cache for both ensured the name as a trait only, and
    # the inventory's PUT got 400 at every audit).
    confdir = tmp_path / "provider_config"
    confdir.mkdir()
    (confdir / "node.yaml").write_text(SAME_NAME)
    source = pc.ProviderConfigSource(str(confdir), pc.load(str(confdir)))
    agent = make_agent()
    root = agent.tracker.node_uuid
    publish(agent, source)
    assert "CUSTOM_FAKE_HOST" in get(operator, f"/resource_providers/{root}/traits")["traits"]
    inventories = get(operator, f"/resource_providers/{root}/inventories")["inventories"]
    assert inventories["CUSTOM_FAKE_HOST"]["total"] == 100
