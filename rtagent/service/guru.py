"""SIGUSR2's Guru Meditation Report, about rtagent itself.

oslo.reports' stock report shows ``cfg.CONF``, the process-wide config that
rtagent never uses (its options live in the ConfigOpts the command line
built: config is passed in, never global), so it showed oslo.messaging's
leftovers instead of rtagent's options. It also adds a "Green Threads"
section whenever greenlet is importable, which is always empty here:
rtagent runs OS threads, no eventlet hub.
"""

from oslo_config import cfg
from oslo_reports import guru_meditation_report as gmr
from oslo_reports.generators import conf as conf_gen
from oslo_reports.generators import process as process_gen
from oslo_reports.generators import threading as thread_gen
from oslo_reports.generators import version as version_gen


def report_class(conf):
    """A TextGuruMeditation class reporting ``conf``.

    oslo.reports builds the report from the class (``handle_signal`` and its
    file watcher are classmethods), so ``conf`` is bound to a class made for
    it. Options declared ``secret`` (passwords, tokens, transport URLs) are
    shown as ``***`` by oslo.reports' configuration model.
    """

    class RtagentReport(gmr.TextGuruMeditation):
        def _readd_sections(self):
            # Replaces oslo.reports' list of sections: the same ones, less
            # the green threads, with rtagent's configuration.
            del self.sections[self.start_section_index :]
            self.add_section("Package", version_gen.PackageReportGenerator(self.version_obj))
            self.add_section("Threads", thread_gen.ThreadReportGenerator(self.traceback))
            self.add_section("Processes", process_gen.ProcessReportGenerator())
            self.add_section("Configuration", lambda: _configuration(conf))

    return RtagentReport


def _configuration(conf):
    """oslo.reports' model of ``conf``, secrets masked, less what it cannot
    print: the sub-command (``run``), an object holding the whole
    ConfigOpts that the report's deep copy recursed through, is shown by
    name."""
    model = conf_gen.ConfigReportGenerator(conf)()
    default = model["default"]
    for name, value in list(default.items()):
        if isinstance(value, cfg.ConfigOpts.SubCommandAttr):
            default[name] = value.name
    return model
