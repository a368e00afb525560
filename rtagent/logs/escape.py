# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Log lines with no raw control characters, whoever logs what.

Log messages quote text rtagent does not choose: ``[pci] alias`` names and
device spec values from the configuration, libvirt's error texts and domain
names, a library's exception. Written raw, a newline in it starts a line
that reads as another record, an ESC drives the terminal showing the
journal, a U+202E shows the rest of the line reversed. The RPC schemas
refuse such characters in arguments; the configuration and libvirt are not
checked, so the log escapes them where every record is written: each
handler's formatter is wrapped (:func:`install`).

What an operator sees: a record's message is one line, every character that
is not printable written as its Python escape (``\\u202e``, ``\\n``;
:func:`rtagent.excerpt.escaped`, as RPC error replies have them). A
traceback keeps its lines, one per frame, each still carrying oslo.log's
prefix; within each line the same characters are escaped, so a line break
in an exception's text stays a line break inside the traceback (as Python
prints it) and nothing else raw gets through. The summary oslo.log appends
to a warning logged while an exception is handled (``: libvirtError: ...``)
is escaped the same way.
"""

import logging

from rtagent.excerpt import escaped


class EscapingFormatter(logging.Formatter):
    """Formats a record with ``inner`` (oslo.log's ``ContextFormatter``,
    its ``JSONFormatter``, or any a logging config file names) and escapes
    what that writes.

    ``inner`` gets a copy of the record whose message is the record's
    message escaped (other handlers get the record as it was logged). Of
    what ``inner`` writes, the record's line (with what it adds there, such
    as oslo.log's exception summary) is escaped whole, so it stays one line;
    the traceback or stack after it is escaped line by line. Escaping is
    idempotent: an already escaped message is unchanged.
    """

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def format(self, record):
        shown = logging.makeLogRecord(record.__dict__)
        shown.msg, shown.args = escaped(record.getMessage()), None
        text = self.inner.format(shown)
        # Formatters append "\n" + the traceback (cached in exc_text) and
        # "\n" + the stack: the record's line is what comes before.
        starts = [text.find("\n" + b) for b in (shown.exc_text, shown.stack_info) if b]
        end = min((at for at in starts if at >= 0), default=len(text))
        text = "\n".join(
            [escaped(text[:end])] + [escaped(line) for line in text[end:].split("\n")[1:]]
        )
        # oslo.log's ColorHandler (log_color) puts its level's colour in
        # the record for the format string: the only ESC meant to be there.
        color = getattr(record, "color", None)
        if isinstance(color, str) and color:
            text = text.replace(escaped(color), color)
        return text


def install():
    """Wrap the formatter of every handler of every logger (the root
    logger's, after ``oslo_log.log.setup``; any a logging config file
    attaches elsewhere) in an :class:`EscapingFormatter`, once.

    Call again whenever the handlers are replaced (a SIGHUP that re-reads
    ``[DEFAULT] log_config_append``): handlers already wrapped are left.
    """
    loggers = [logging.getLogger()]
    loggers += [
        logger
        for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)
    ]
    for logger in loggers:
        for handler in list(logger.handlers):
            if not isinstance(handler.formatter, EscapingFormatter):
                handler.setFormatter(EscapingFormatter(handler.formatter or logging.Formatter()))
