# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""nova's host metrics notifications, from the agent's compute-node view.

nova's tracker sends ``compute.metrics.update`` (unversioned) and the
versioned ``metrics.update`` after reading its monitors at each periodic
audit, when there are metrics. With rtagent the agent reads them
(``[DEFAULT] compute_monitors`` of the rtagent daemon) and the view carries
them as nova's ``MonitorMetricList.to_list()``; this sends the same two
notifications through nova's own notifier, so their consumers keep working.
"""

import logging

from nova import objects, rpc
from nova.compute import utils as compute_utils
from oslo_serialization import jsonutils

LOG = logging.getLogger(__name__)


def notify_update(context, host, host_ip, nodename, metrics):
    """Send nova's metrics notifications for ``metrics`` (the view's list);
    nothing when there are none, as nova. A failure is logged, never
    raised: the record is already written."""
    if not metrics:
        return
    try:
        # from_json turns the view's fractions back into nova's percents.
        metric_list = objects.MonitorMetricList.from_json(jsonutils.dumps(metrics))
        payload = {
            "nodename": nodename,
            "metrics": metric_list.to_list(),
            "host": host,
            "host_ip": host_ip,
        }
        rpc.get_notifier(service="compute", host=nodename).info(
            context, "compute.metrics.update", payload
        )
        compute_utils.notify_about_metrics_update(context, host, host_ip, nodename, metric_list)
    except Exception as exc:  # a notification never fails the audit
        LOG.warning("Metrics notification of node %s not sent: %s", nodename, exc)
