"""[placement]: how to reach OpenStack Placement.

The options are keystoneauth1's own (session, auth and adapter), registered
through ``keystoneauth1.loading`` so that any auth plugin works, exactly as in
nova.conf's [placement] section.
"""

import copy

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

GROUP = cfg.OptGroup("placement", title="Placement service options")
SERVICE_TYPE = "placement"

# Our defaults for keystoneauth's options. keystoneauth's own timeout default
# is none at all: a Placement that accepts connections and never answers
# would then hang the audit loop forever.
DEFAULTS = {
    "service_type": SERVICE_TYPE,
    "valid_interfaces": ["internal", "public"],
    "timeout": 30,
}


def register_opts(conf):
    # A fresh OptGroup per ConfigOpts (an OptGroup holds option state).
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title))
    ks_loading.register_session_conf_options(conf, GROUP.name)
    ks_loading.register_auth_conf_options(conf, GROUP.name)
    ks_loading.register_adapter_conf_options(conf, GROUP.name, include_deprecated=False)
    for name, value in DEFAULTS.items():
        conf.set_default(name, value, group=GROUP.name)


def list_opts():
    opts = (
        ks_loading.get_session_conf_options()
        + ks_loading.get_auth_common_conf_options()
        + ks_loading.get_auth_plugin_conf_options("password")
        + ks_loading.get_adapter_conf_options(include_deprecated=False)
    )
    # The sample shows our defaults, not keystoneauth's blanks; copy so the
    # library's shared option objects are left untouched.
    opts = [copy.deepcopy(opt) for opt in opts]
    for opt in opts:
        if opt.dest in DEFAULTS:
            opt.default = DEFAULTS[opt.dest]
    # The password plugin and the adapter both declare some options; list each once.
    unique = {}
    for opt in opts:
        unique.setdefault(opt.dest, opt)
    return {GROUP: sorted(unique.values(), key=lambda o: o.dest)}
