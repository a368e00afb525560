"""PCI devices as Placement providers (rtagent.placement.pci_providers), as a table:
which provider each device is counted on, its name, resource class,
traits, total and reserved, every refusal, and the allocations of held
devices."""

import pytest

from rtagent.pci import devices, errors, model
from rtagent.placement import pci_providers
from tests.unit.pci.hosts import GPU, PF1, PF2, VF1A, VF1B, VF2A, pf, vf

NODE = "5a3f0c8e-3f4b-4c1e-9d4e-0d7b3c2a1f00"
HOST = "cn1"
GPU_DEV = model.HostDevice(GPU, "10de", "1db4")


def table(*pairs):
    return devices.refresh(devices.make_table(), pairs)


def summary(found):
    """name -> (class, total, reserved, traits) of each provider."""
    rows = {}
    for p in found.providers:
        assert p.parent_uuid == NODE
        assert p.uuid == pci_providers.provider_uuid(NODE, p.name.split("_", 1)[1].lower())
        ((rc, inv),) = p.inventories.items()
        assert (inv.max_unit, inv.allocation_ratio) == (inv.total, 1.0)
        rows[p.name] = (rc, inv.total, inv.reserved, set(p.traits))
    return rows


OWN = {"COMPUTE_MANAGED_PCI_DEVICE", "OWNER_NOVA"}


@pytest.mark.parametrize(
    "pairs, expected",
    [
        pytest.param(
            [(GPU_DEV, {})],
            {f"{HOST}_0000:05:00.0": ("CUSTOM_PCI_10DE_1DB4", 1, 0, OWN)},
            id="a standalone device, class from its ids",
        ),
        pytest.param(
            [
                (
                    GPU_DEV,
                    {"resource_class": "CUSTOM_GPU", "traits": ("CUSTOM_A", "HW_GPU_API_VULKAN")},
                )
            ],
            {f"{HOST}_0000:05:00.0": ("CUSTOM_GPU", 1, 0, OWN | {"CUSTOM_A", "HW_GPU_API_VULKAN"})},
            id="class and traits from the spec",
        ),
        pytest.param(
            [(vf(VF1A, PF1, 0), {}), (vf(VF1B, PF1, 0), {}), (vf(VF2A, PF2, 1), {})],
            {
                f"{HOST}_0000:81:00.0": ("CUSTOM_PCI_8086_154C", 2, 0, OWN),
                f"{HOST}_0000:82:00.0": ("CUSTOM_PCI_8086_154C", 1, 0, OWN),
            },
            id="VFs counted on their PF's provider",
        ),
        pytest.param(
            [
                (model.HostDevice(VF1A, "15b3", "101e", model.TYPE_VDPA, 0, PF1), {}),
                (model.HostDevice(VF1B, "15b3", "101e", model.TYPE_VDPA, 0, PF1), {}),
            ],
            {f"{HOST}_0000:81:00.0": ("CUSTOM_PCI_15B3_101E", 2, 0, OWN)},
            id="vDPA devices counted on their PF's provider, as VFs",
        ),
        pytest.param(
            [(pf(PF1, 0), {"one_time_use": True, "live_migratable": True})],
            {
                f"{HOST}_0000:81:00.0": (
                    "CUSTOM_PCI_8086_1572",
                    1,
                    0,
                    OWN | {"HW_PCI_ONE_TIME_USE", "HW_PCI_LIVE_MIGRATABLE"},
                )
            },
            id="a PF alone, one-time-use and live-migratable",
        ),
        pytest.param(
            [
                (pf(PF1, 0), {"physical_network": "p1"}),
                (vf(VF1A, PF1, 0), {"physical_network": "p1"}),
            ],
            {},
            id="devices for neutron stay off Placement",
        ),
    ],
)
def test_providers(pairs, expected):
    assert summary(pci_providers.layout(table(*pairs), NODE, HOST)) == expected


@pytest.mark.parametrize(
    "pairs, reason",
    [
        pytest.param(
            [(pf(PF1, 0), {}), (vf(VF1A, PF1, 0), {})],
            "the PF and its VFs are both tracked",
            id="PF with its VFs",
        ),
        pytest.param(
            [(vf(VF1A, PF1, 0), {}), (vf(VF1B, PF1, 0), {"resource_class": "CUSTOM_X"})],
            "its VFs have different resource classes",
            id="VFs of one PF, two classes",
        ),
        pytest.param(
            [(vf(VF1A, PF1, 0), {}), (vf(VF1B, PF1, 0), {"traits": ("CUSTOM_X",)})],
            "its VFs have different traits",
            id="VFs of one PF, two trait sets",
        ),
    ],
)
def test_layouts_nova_cannot_model_are_refused(pairs, reason):
    with pytest.raises(errors.PlacementLayoutInvalid) as err:
        pci_providers.layout(table(*pairs), NODE, HOST)
    assert err.value.code == "pci.placement_layout_invalid"
    assert f"under {PF1} cannot be reported to Placement: {reason}" in str(err.value)


def test_drift_is_reserved_and_a_held_one_time_use_device_reserves_all():
    t = table((vf(VF1A, PF1, 0), {}), (vf(VF1B, PF1, 0), {}), (pf(PF2, 1), {"one_time_use": True}))
    t = devices.claim(t, [VF1A], "domain-by-hand")
    assert (
        summary(pci_providers.layout(t, NODE, HOST, drift={VF1A}))[f"{HOST}_0000:81:00.0"][2] == 1
    )
    assert summary(pci_providers.layout(t, NODE, HOST))[f"{HOST}_0000:81:00.0"][2] == 0  # a claim's
    assert summary(pci_providers.layout(t, NODE, HOST))[f"{HOST}_0000:82:00.0"][1:3] == (1, 0)
    t = devices.claim(t, [PF2], "inst")
    assert summary(pci_providers.layout(t, NODE, HOST))[f"{HOST}_0000:82:00.0"][1:3] == (1, 1)


def test_allocations_of_held_devices():
    t = table(
        (vf(VF1A, PF1, 0), {}),
        (vf(VF1B, PF1, 0), {}),
        (GPU_DEV, {}),
        (pf(PF2, 1), {"physical_network": "p"}),
    )
    found = pci_providers.layout(t, NODE, HOST)
    assert found.allocations([VF1A, VF1B, GPU, PF2]) == {
        pci_providers.provider_uuid(NODE, PF1): {"CUSTOM_PCI_8086_154C": 2},
        pci_providers.provider_uuid(NODE, GPU): {"CUSTOM_PCI_10DE_1DB4": 1},
    }  # the physnet PF: not in Placement
    assert found.allocations([]) == {}


def test_a_device_gone_while_held_stays_counted_until_freed():
    t = devices.claim(table((vf(VF1A, PF1, 0), {}), (vf(VF1B, PF1, 0), {})), [VF1A], "inst")
    t = devices.refresh(t, [(vf(VF1B, PF1, 0), {})])  # VF1A is gone from the host
    assert summary(pci_providers.layout(t, NODE, HOST))[f"{HOST}_0000:81:00.0"][1] == 2
    t = devices.free(t, "inst")
    assert summary(pci_providers.layout(t, NODE, HOST))[f"{HOST}_0000:81:00.0"][1] == 1
