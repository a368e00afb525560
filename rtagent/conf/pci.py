"""[pci]: the host PCI devices guests may use (``device_spec``), the named
requests flavors make for them (``alias``) and whether they are reported to
Placement (``report_in_placement``): nova's options, names, syntax and
defaults, so a nova.conf's ``[pci]`` section carries over.

The values are parsed by :mod:`rtagent.pci.spec` and :mod:`rtagent.pci.alias`
(nova's rules, a few stricter ones); :func:`parse` hands the result to
whoever needs it, from the ConfigOpts it is given. The options need a
restart: a reload checks a changed value and otherwise ignores it.

nova's ``[filter_scheduler] pci_in_placement`` is a scheduler option and not
rtagent's: aliases are read as if it were ``report_in_placement``.
"""

import dataclasses
import types

from oslo_config import cfg

from rtagent.pci import alias, spec

GROUP = cfg.OptGroup("pci", title="PCI passthrough options")

ALL_OPTS = [
    cfg.MultiStrOpt(
        "device_spec",
        default=[],
        deprecated_opts=[
            cfg.DeprecatedOpt("passthrough_whitelist", group="pci"),
            cfg.DeprecatedOpt("pci_passthrough_whitelist", group="DEFAULT"),
        ],
        help="Host PCI devices that guests may be given, and the tags they carry "
        "(nova's option and syntax). Each value is a JSON object, or a JSON list of "
        "objects; give the option again for more. The keys vendor_id and product_id "
        "(hex, up to FFFF), address and devname pick devices; a key left out "
        "matches any device. address is either a glob "
        '"[[[[domain]:]bus]:][slot][.[function]]" where a part may be * or empty, '
        "or an object of regular expressions with the keys domain, bus, slot and "
        "function (RE2 syntax, matched in linear time: no backreferences or "
        "lookaround, at most 256 characters, repetition counts up to 1000); "
        "devname is a network interface name, and excludes address. "
        "Every other key is a tag copied onto the devices picked: "
        "physical_network, trusted, remote_managed, managed, live_migratable, "
        "one_time_use (the booleans as true/false, yes/no, ...), resource_class and "
        "traits (the Placement class and comma-separated traits of the devices, "
        "named as nova normalises them: upper case, CUSTOM_ added) or a free tag. "
        "A device takes the first spec that picks it; a spec naming one PF exactly "
        "also picks its VFs. Examples: "
        '{"vendor_id": "8086", "product_id": "154c", "physical_network": "physnet1"} '
        'and {"address": "0000:81:00.*", "resource_class": "CUSTOM_FPGA"}. A value '
        "that does not parse stops the start (and check-config) with one line naming "
        "the entry, counted from 0, and the key at fault. The devices that match are "
        "tracked on every audit, offered in the compute-node view's "
        "pci_device_pools (rtagent status lists them) and claimed by the PCI requests of "
        "instance claims and moves (RPC pci_requests), and reported to Placement as "
        "child providers of the node with report_in_placement. See docs/pci.md.",
    ),
    cfg.MultiStrOpt(
        "alias",
        default=[],
        deprecated_name="pci_alias",
        deprecated_group="DEFAULT",
        help="A name a flavor uses to ask for PCI devices "
        '(pci_passthrough:alias="<name>:<count>"), nova\'s option and syntax. '
        "Each value is one JSON object of strings; give the option again for more "
        "aliases. Keys: name (required); vendor_id and product_id (4 hex digits); "
        "device_type (type-PCI, type-PF to pass a whole SR-IOV card, or type-VF); "
        "numa_policy (legacy, the default, or preferred, required, socket); "
        "resource_class and traits (what the device's Placement provider must "
        "have); live_migratable (yes/no). Without report_in_placement every alias "
        "needs vendor_id and product_id, and a name given again adds an "
        "alternative (every entry of that name then states the same device_type "
        "and numa_policy); with it, an alias needs vendor_id and product_id or "
        "resource_class, and each name appears once. Example: "
        '{"name": "qat", "vendor_id": "8086", "product_id": "0443", '
        '"device_type": "type-PCI", "numa_policy": "required"}. A value that does '
        "not parse stops the start (and check-config) with one line naming the "
        "entry and the key at fault. Claims and moves name aliases in their PCI requests "
        "(RPC pci_requests). See docs/pci.md.",
    ),
    cfg.BoolOpt(
        "report_in_placement",
        default=False,
        help="Report the devices of device_spec to Placement, as inventories of "
        "child providers of the node named <hypervisor_hostname>_<ADDRESS>, one per PF "
        "(counting its VFs) or standalone device; devices with a physical_network stay "
        "off Placement (nova's option, model and default). Turning it on gives existing "
        "instances their devices' allocations; unlike nova, it may be turned off again: "
        "those allocations are removed and the providers deleted. The one_time_use tag "
        "needs it. It also sets how "
        "aliases are read: when true, as nova reads them with [filter_scheduler] "
        "pci_in_placement on (a scheduler option, not rtagent's); when false, as "
        "with it off, and, when true, an alias's resource_class and traits are matched "
        "against the devices a claim takes. See docs/pci.md.",
    ),
]


@dataclasses.dataclass(frozen=True)
class PciConfig:
    """The parsed ``[pci]`` options.

    ``device_specs``: the :class:`~rtagent.pci.spec.DeviceSpec` values, in
    order; ``aliases``: a read-only mapping of alias name to its
    :class:`~rtagent.pci.alias.Alias` entries; ``report_in_placement`` as
    configured (the spec and alias rules that depend on it are applied).
    """

    device_specs: tuple = ()
    aliases: types.MappingProxyType = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    report_in_placement: bool = False


def parse(conf):
    """The ``[pci]`` options of ``conf`` (a ConfigOpts with them registered),
    parsed.

    :raises rtagent.pci.errors.InvalidDeviceSpec: a ``device_spec`` value is
        invalid; its one-line message names the entry and the field.
    :raises rtagent.pci.errors.InvalidAlias: an ``alias`` value is invalid,
        or entries of one name disagree.
    :raises oslo_config.cfg.Error, ValueError: ``report_in_placement`` is not
        a boolean (:func:`rtagent.conf.validation.validate` reads it first
        and says so as a ConfigError).
    """
    group = conf[GROUP.name]
    report = group.report_in_placement
    return PciConfig(
        device_specs=spec.parse_device_specs(group.device_spec, report_in_placement=report),
        aliases=alias.parse_aliases(group.alias, in_placement=report),
        report_in_placement=report,
    )


def register_opts(conf):
    # A fresh OptGroup per ConfigOpts: an OptGroup holds its options' values
    # and overrides, so sharing the module's one would leak between configs.
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title))
    conf.register_opts(ALL_OPTS, group=GROUP.name)


def list_opts():
    return {GROUP: ALL_OPTS}
