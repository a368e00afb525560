"""ComputeNode.metrics from the view, byte for byte what nova's resource
tracker writes, and what nova's scheduler reads back (MetricsWeigher).

Run by ``make test-nova`` in .venv-nova.
"""

import datetime

from nova import objects
from oslo_serialization import jsonutils

from rtagent.nova import computenode
from rtagent.tracker import view
from rtagent.virt.host import HostMetric

objects.register_all()

T = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456)
SOURCE = "libvirt.LibvirtDriver"
VALUES = {
    "cpu.frequency": 2600,
    "cpu.user.time": 9797400030,
    "cpu.kernel.time": 34678723400020,
    "cpu.idle.time": 87264900045,
    "cpu.iowait.time": 763600005,
    "cpu.user.percent": 28,
    "cpu.kernel.percent": 20,
    "cpu.idle.percent": 45,
    "cpu.iowait.percent": 5,
    "cpu.percent": 55,
}


def metrics_view():
    return {"metrics": view.metrics_list(HostMetric(n, v, T, SOURCE) for n, v in VALUES.items())}


def novas_own():
    """What nova's _get_host_metrics + update_available_resource store."""
    metric_list = objects.MonitorMetricList(
        objects=[
            objects.MonitorMetric(name=n, value=v, timestamp=T, source=SOURCE)
            for n, v in VALUES.items()
        ]
    )
    return jsonutils.dumps(metric_list.to_list())


def test_metrics_are_the_string_nova_stores():
    cn = objects.ComputeNode()
    computenode.apply_view(cn, metrics_view())
    assert cn.metrics == novas_own()
    assert "metrics" in cn.obj_what_changed()


def test_the_scheduler_reads_them_back():
    cn = objects.ComputeNode()
    computenode.apply_view(cn, metrics_view())
    # nova.scheduler.host_manager.HostState.update: what MetricsWeigher weighs.
    read = objects.MonitorMetricList.from_json(cn.metrics)
    assert {m.name: m.value for m in read} == VALUES
    assert {(m.timestamp.replace(tzinfo=None), m.source) for m in read} == {(T, SOURCE)}


def test_none_is_an_empty_list_as_nova_writes_without_monitors():
    cn = objects.ComputeNode()
    computenode.apply_view(cn, {"metrics": []})
    assert cn.metrics == "[]"


def test_unchanged_metrics_are_not_rewritten():
    cn = objects.ComputeNode(metrics=novas_own())
    cn.obj_reset_changes()
    computenode.apply_view(cn, metrics_view())
    assert "metrics" not in cn.obj_what_changed()


def test_the_periodic_rewrites_them_unchanged():
    # rewrite=True: the periodic writes the whole view, so a row another
    # writer changed behind this copy is put right.
    cn = objects.ComputeNode(metrics=novas_own(), stats={"num_instances": "0"})
    cn.obj_reset_changes()
    computenode.apply_view(cn, {**metrics_view(), "stats": {"num_instances": 0}}, rewrite=True)
    assert {"metrics", "stats"} <= cn.obj_what_changed()
    assert cn.metrics == novas_own()


def test_a_view_without_the_field_leaves_them_be():
    cn = objects.ComputeNode(metrics='[{"name": "x"}]')
    cn.obj_reset_changes()
    computenode.apply_view(cn, {"stats": {}})
    assert cn.metrics == '[{"name": "x"}]'
    assert "metrics" not in cn.obj_what_changed()
