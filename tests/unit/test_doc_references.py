"""The README and docs/*.md name only what exists (issue 35).

Each check reads the documents as text and compares what they name with
the code: ``[group] option`` references with the options rtagent registers
(the generator's namespaces, as the sample config lists them), ``make``
targets with the Makefile, ``rtagent <command>`` with the command's
subparsers, local links and quoted section names with the files and their
headings (anchors as GitHub makes them), RPC versions with
``rtagent.rpc.transport.API_VERSION`` and the contract's version history,
and the tree's paths and rtagent's dotted module names with the files.
A failure names the file, the line and what it names.
"""

import dataclasses
import functools
import pathlib
import re

from oslo_config import generator

from rtagent.rpc import transport

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

# nova.conf options the docs name as nova's (to compare, or to say where
# nova reads what rtagent reads elsewhere). rtagent registers none of them,
# on purpose; each is named with why.
NOVA_OPTIONS = {
    ("DEFAULT", "instances_path"): "nova's; rtagent's is [libvirt] instances_path",
    ("filter_scheduler", "pci_in_placement"): "nova's scheduler option",
    ("metrics", "weight_setting"): "nova's MetricsWeigher option",
    ("workarounds", "disable_fallback_pcpu_query"): "nova's; rtagent's is cpu_pinning_fallback",
    ("workarounds", "reserve_disk_resource_for_image_cache"): "nova's workaround option",
    # docs/libvirt-audit.md compares rtagent's traits with what nova's
    # libvirt driver derives from these.
    ("libvirt", "virt_type"): "nova's; rtagent picks kvm or qemu from the host",
    ("libvirt", "cpu_mode"): "nova's; rtagent reads the host CPU",
    ("libvirt", "swtpm_enabled"): "nova's; rtagent reads domain capabilities",
    ("libvirt", "supported_tpm_secret_security"): "nova's TPM option",
    ("libvirt", "file_backed_memory"): "nova's memory backing option",
    ("compute", "image_type_exclude_list"): "nova's image type option",
}
# Placeholders, not names.
PLACEHOLDER_GROUPS = frozenset({"group"})


@dataclasses.dataclass(frozen=True)
class Doc:
    path: pathlib.Path
    prose: str  # the text outside fenced blocks; fenced lines blanked
    fences: tuple  # (language, first line number, text)

    @property
    def name(self):
        return self.path.relative_to(ROOT).as_posix()

    def line_of(self, offset):
        return self.prose.count("\n", 0, offset) + 1


def _read(path):
    prose, fences, fence, lang, start, body = [], [], None, "", 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        marker = re.match(r"\s*(`{3,}|~{3,})(\S*)", line)
        if fence is None and marker:
            fence, lang, start, body = marker.group(1), marker.group(2), number, []
            prose.append("")
        elif fence is not None and line.strip().startswith(fence):
            fences.append((lang, start, "\n".join(body)))
            fence = None
            prose.append("")
        elif fence is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    return Doc(path, "\n".join(prose), tuple(fences))


@functools.cache
def docs():
    return tuple(_read(p) for p in DOCS)


def _spans(text):
    """(offset, content) of each inline code span."""
    return [(m.start(), m.group(2)) for m in re.finditer(r"(`+)(.+?)\1", text, re.S)]


def _flat(text):
    return re.sub(r"\s+", " ", text)


# -- options ---------------------------------------------------------------


@functools.cache
def registered_options():
    """{(group, name)} of every option the sample config is generated from,
    with the deprecated names rtagent still reads."""
    text = (ROOT / "etc/rtagent/rtagent-config-generator.conf").read_text()
    namespaces = re.findall(r"^namespace\s*=\s*(\S+)", text, re.M)
    assert "rtagent" in namespaces
    known = set()
    for _namespace, listed in generator._list_opts(namespaces):
        for group, opts in listed:
            group_name = getattr(group, "name", group) or "DEFAULT"
            for opt in opts:
                known.add((group_name, opt.dest))
                known.add((group_name, opt.name))
                for old in opt.deprecated_opts:
                    known.add((old.group or group_name, old.name or opt.name))
    # nova.conf's [rtagent] group of rtagent-nova-compute (the nova extra).
    from rtagent.nova import compute as nova_compute

    known.update((nova_compute.GROUP, opt.dest) for opt in nova_compute.OPTS)
    # The [placement] auth plugin's own options depend on auth_type; the
    # sample lists the password plugin's. Any plugin's are valid there.
    from keystoneauth1 import loading

    for plugin in ("password", "v3password", "token", "v3applicationcredential"):
        for opt in loading.get_auth_plugin_conf_options(plugin):
            known.add(("placement", opt.dest))
    return frozenset(known)


@functools.cache
def registered_groups():
    return frozenset(group for group, _name in registered_options())


_OPTION = r"\[([A-Za-z_]+)\]\s+([a-z][a-z0-9_]*)"


def option_references():
    """(doc, line, group, name) of every ``[group] name`` the documents
    name: inside one code span, in prose (a name with an underscore), and
    in ini examples (a section header, then ``name = value``)."""
    for doc in docs():
        for offset, span in _spans(doc.prose):
            m = re.match(_OPTION, _flat(span))
            if m:
                yield doc, doc.line_of(offset), m.group(1), m.group(2)
        unquoted = re.sub(r"(`+).+?\1", lambda m: " " * len(m.group(0)), doc.prose, flags=re.S)
        for m in re.finditer(r"(?<![\w`(])" + _OPTION, unquoted):
            if "_" in m.group(2) and not unquoted[m.end(1) + 1 :].startswith("("):
                yield doc, doc.line_of(m.start()), m.group(1), m.group(2)
        for lang, start, text in doc.fences:
            if lang != "ini":
                continue
            group = None
            for number, line in enumerate(text.splitlines(), start + 1):
                header = re.match(r"\s*\[([A-Za-z_]+)\]\s*$", line)
                setting = re.match(r"\s*([a-z][a-z0-9_]*)\s*=", line)
                if header:
                    group = header.group(1)
                elif setting and group:
                    yield doc, number, group, setting.group(1)


def test_every_option_named_exists():
    known = registered_options()
    missing = sorted(
        {
            f"{doc.name}:{line}: [{group}] {name}"
            for doc, line, group, name in option_references()
            if (group, name) not in known
            and (group, name) not in NOVA_OPTIONS
            and group not in PLACEHOLDER_GROUPS
        }
    )
    assert not missing, "options that rtagent does not register:\n" + "\n".join(missing)


def test_the_nova_allowlist_names_no_option_of_rtagent():
    # An allowlisted name that rtagent registers would hide nothing; one it
    # names in a group it does not have is still nova's.
    assert not set(NOVA_OPTIONS) & registered_options()


def test_the_nova_allowlist_is_used():
    # An entry no document names any more goes: the list stays short.
    named = {(group, name) for _doc, _line, group, name in option_references()}
    assert set(NOVA_OPTIONS) <= named, set(NOVA_OPTIONS) - named


def test_option_references_are_found():
    found = {(group, name) for _doc, _line, group, name in option_references()}
    assert {
        ("pci", "device_spec"),
        ("pci", "report_in_placement"),
        ("rtagent", "placement_refresh_interval"),
        ("filter_scheduler", "pci_in_placement"),
        ("health", "bind_address"),  # an ini example
    } <= found


# -- make targets and commands ---------------------------------------------


@functools.cache
def make_targets():
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.M))


def _code(doc):
    """(line, text) of each code span and each fenced line."""
    for offset, span in _spans(doc.prose):
        yield doc.line_of(offset), _flat(span)
    for _lang, start, text in doc.fences:
        yield from enumerate(text.splitlines(), start + 1)


def make_references():
    """(doc, line, target): every target of a code span or fenced line that
    is a make command, and the first word after any other ``make``."""
    for doc in docs():
        for line, text in _code(doc):
            commands = re.finditer(
                r"(?:^\s*(?:\$\s+)?(?:[A-Z_]+=\S*\s+)*|[;&|/]\s*|\(=\s*)make((?:\s+[a-z][\w-]*)+)",
                text,
            )
            for command in commands:
                for target in command.group(1).split():
                    yield doc, line, target
        for offset, span in _spans(doc.prose):
            for m in re.finditer(r"(?<![\w/.-])make\s+([a-z][\w-]*)", _flat(span)):
                yield doc, doc.line_of(offset), m.group(1)


def test_every_make_target_named_exists():
    targets = make_targets()
    missing = sorted(
        {f"{d.name}:{line}: make {t}" for d, line, t in make_references() if t not in targets}
    )
    assert not missing, "make targets not in the Makefile:\n" + "\n".join(missing)


@functools.cache
def commands():
    text = (ROOT / "rtagent/cmd/main.py").read_text()
    return frozenset(re.findall(r"add_parser\(\s*\"([a-z-]+)\"", text))


def command_references():
    """(doc, line, command) of each ``rtagent [options] <command>``: a code
    span or a fenced line that starts with ``rtagent``."""
    for doc in docs():
        for line, text in _code(doc):
            m = re.match(r"\s*(?:\$\s+|sudo\s+)?rtagent((?:\s+\S+)*)", text)
            if not m:
                continue
            words = m.group(1).split()
            while words and words[0].startswith("-"):
                option = words.pop(0)
                if option == "--config-file" and words:
                    words.pop(0)
            if words and re.fullmatch(r"[a-z][a-z-]*", words[0]):
                yield doc, line, words[0]


def test_every_rtagent_command_named_exists():
    known = commands()
    assert {"run", "status", "audit", "check-config"} <= known
    missing = sorted(
        {f"{d.name}:{line}: rtagent {c}" for d, line, c in command_references() if c not in known}
    )
    assert not missing, "rtagent commands that do not exist:\n" + "\n".join(missing)


# -- links and sections ----------------------------------------------------


def _heading_text(raw):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", raw.strip().rstrip("#").strip())
    return text.replace("`", "")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and
    ``_`` dropped, spaces made ``-``."""
    return re.sub(r"[^\w\- ]", "", _heading_text(heading).lower()).replace(" ", "-")


@functools.cache
def headings(path):
    """(texts, anchors) of the markdown file at ``path``: the headings'
    texts and a paragraph's bold label (``**A lost store.**``) are the
    sections a text may name; the headings' anchors, those a link may."""
    doc = _read(path)
    texts, anchors, seen = set(), set(), {}
    for m in re.finditer(r"^#{1,6}\s+(.+)$", doc.prose, re.M):
        base = slug(m.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")
        texts.add(_heading_text(m.group(1)).lower())
    for m in re.finditer(r"^\s*(?:- )?\*\*([^*]+?)[.:]?\*\*", doc.prose, re.M):
        texts.add(m.group(1).replace("`", "").lower())
    return frozenset(texts), frozenset(anchors)


def names_section(path, section):
    """Whether ``section`` (lower case, no backticks) is a section of
    ``path``: a heading, or a heading's start before ``:``, ``,`` or ``(``
    ("Running it" for "Running it: `rtagent-nova-compute`")."""
    return any(
        text == section or re.match(re.escape(section) + r"\s*[:,(]", text)
        for text in headings(path)[0]
    )


def link_problems():
    for doc in docs():
        unquoted = re.sub(r"(`+).+?\1", lambda m: " " * len(m.group(0)), doc.prose, flags=re.S)
        for m in re.finditer(r"\]\(([^)\s]+)\)", unquoted):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            where = f"{doc.name}:{doc.line_of(m.start())}: ({target})"
            file_part, _, anchor = target.partition("#")
            path = (doc.path.parent / file_part).resolve() if file_part else doc.path
            if not path.exists():
                yield f"{where}: no file {file_part}"
            elif anchor and path.suffix == ".md" and anchor not in headings(path)[1]:
                yield f"{where}: no heading #{anchor} in {path.relative_to(ROOT)}"


def test_every_local_link_and_anchor_resolves():
    problems = sorted(set(link_problems()))
    assert not problems, "links that lead nowhere:\n" + "\n".join(problems)


_NAMED_FILE = (
    r"(?:`?((?:docs/)?[\w-]+\.md)`?|(?:the )?(README))"  # a file, quoted or not
    r",\s+\"([^\"]+)\""  # then its section, in double quotes
)


def section_problems():
    """Sections named in words: ``docs/operations.md``, "The state
    directory"; README, "State and identity"; "Claims" below."""
    for doc in docs():
        text = doc.prose
        for m in re.finditer(_NAMED_FILE, text):
            name = m.group(1) or "README.md"
            path = ROOT / name if (ROOT / name).exists() else doc.path.parent / name
            section = _flat(m.group(3)).replace("`", "").lower()
            where = f'{doc.name}:{doc.line_of(m.start())}: {name}, "{m.group(3)}"'
            if not path.exists():
                yield f"{where}: no file {name}"
            elif not names_section(path, section):
                yield f"{where}: no such heading"
        for m in re.finditer(
            r"\"([^\"]+)\"\s+(?:below|above)\b|\b(?:below|above),\s+\"([^\"]+)\"", text
        ):
            section = _flat(m.group(1) or m.group(2)).replace("`", "").lower()
            if not names_section(doc.path, section):
                yield f'{doc.name}:{doc.line_of(m.start())}: "{section}": no such heading'


def test_every_section_named_in_words_exists():
    problems = sorted(set(section_problems()))
    assert not problems, "sections that do not exist:\n" + "\n".join(problems)


def test_slugs_are_githubs():
    assert slug("A lost or emptied store (--accept-empty-state)") == (
        "a-lost-or-emptied-store---accept-empty-state"
    )
    assert slug("`pci.devices_unavailable`") == "pcidevices_unavailable"
    assert slug("Domains already pinned (`rtagent.numa.domains`)") == (
        "domains-already-pinned-rtagentnumadomains"
    )


# -- RPC versions ----------------------------------------------------------

CURRENT = tuple(int(p) for p in transport.API_VERSION.split("."))
_VERSION = r"(\d+)\.(\d+)\b(?!\s*(?:s|ms|seconds?|%)\b)"


def _version(m, first=1):
    return int(m.group(first)), int(m.group(first + 1))


def version_references():
    """(doc, line, version, kind): kind is "current" where the text states
    the API's version (the contract's title, "API 1.N, see docs/rpc-api.md",
    the Target's version), else "named"."""
    for doc in docs():
        text = doc.prose
        patterns = (
            (r"(?<!Placement )(?<!microversion )\b(?:RPC API|RPC|API)\s+" + _VERSION, "named"),
            (r"\b[Ss]ince\s+" + _VERSION, "named"),
            (r"\b(?:added\s+)?within\s+" + _VERSION, "named"),
        )
        for pattern, kind in patterns:
            for m in re.finditer(pattern, text):
                if "microversion" in text[max(0, m.start() - 30) : m.start()]:
                    continue
                yield doc, doc.line_of(m.start()), _version(m), kind
        for pattern in (
            r"^# rtagent RPC API " + _VERSION,
            r"\bAPI\s+" + _VERSION + r",\s+see\s+`?docs/rpc-api\.md",
            r"\bversion\s+`" + _VERSION + r"`",
        ):
            for m in re.finditer(pattern, text, re.M):
                yield doc, doc.line_of(m.start()), _version(m), "current"


def test_no_version_beyond_the_api_and_the_api_version_stated_is_current():
    problems = []
    for doc, line, version, kind in version_references():
        if version[0] != CURRENT[0] or version > CURRENT:
            problems.append(
                f"{doc.name}:{line}: {version[0]}.{version[1]} > {transport.API_VERSION}"
            )
        elif kind == "current" and version != CURRENT:
            problems.append(
                f"{doc.name}:{line}: states API {version[0]}.{version[1]}; it is "
                f"{transport.API_VERSION}"
            )
    assert not problems, "RPC versions that are not the API's:\n" + "\n".join(sorted(set(problems)))


@functools.cache
def version_history():
    """{name: version} of what each "1.N added `x`" line of the contract's
    Versioning section added (the names before its first "to"/"(")."""
    text = (ROOT / "docs/rpc-api.md").read_text()
    added = {}
    for m in re.finditer(r"^" + _VERSION + r" added (.*)$", text, re.M):
        head = re.split(r" to | \(", m.group(3))[0]
        for name in re.findall(r"`([\w.]+)`", head):
            added.setdefault(name, _version(m))
    return added


def test_the_contract_documents_the_current_version():
    history = version_history()
    assert max(history.values()) == CURRENT, history
    assert history["running_devices"] == (1, 7)
    assert history["attach_pci_devices"] == (1, 6)


def test_versions_named_beside_what_they_added_agree():
    """``running_cpus`` (API 1.5), RPC 1.6 ``attach_pci_devices``: a version
    named next to something the contract says a version added is that one."""
    history = version_history()
    problems = []
    for doc in docs():
        text = doc.prose
        for m in re.finditer(r"\b(?:API|RPC|[Ss]ince)\s+" + _VERSION, text):
            if "microversion" in text[max(0, m.start() - 30) : m.start()]:
                continue
            version = _version(m)
            window = text[max(0, m.start() - 60) : m.end() + 40]
            near = {n for n in re.findall(r"`([\w.]+)`", window) if n in history}
            if near and not any(history[n] == version for n in near):
                problems.append(
                    f"{doc.name}:{doc.line_of(m.start())}: {version[0]}.{version[1]} beside "
                    + ", ".join(f"{n} ({history[n][0]}.{history[n][1]})" for n in sorted(near))
                )
    assert not problems, "versions that disagree with the contract:\n" + "\n".join(problems)


# -- paths and modules of the tree ------------------------------------------

# A file of the tree named by its path, or a module of rtagent by its dotted
# name (``rtagent.placement.seen``), in prose or code. Dotted names that are
# not modules: notification event types, and names under a module (a class,
# a function) which the module's presence vouches for.
_PATH = re.compile(r"(?<![\w/.-])((?:rtagent|tests|tools|benchmarks|docs|etc)/[\w./-]*\w)")
_DOTTED = re.compile(r"(?<![\w./-])(rtagent(?:\.[a-z_][a-z0-9_]*)+)")
# The state directory's files, and notification event types.
NOT_MODULES = frozenset(
    {
        "rtagent.sqlite",
        "rtagent.store_id",
        "rtagent.lock",
        "rtagent.compute_node",
        "rtagent.metrics.update",
        "rtagent.instance_info",
    }
)


def path_references():
    """(doc, line, path) of each path of the tree a document names."""
    for doc in docs():
        text = doc.path.read_text()
        for m in _PATH.finditer(text):
            yield doc, text.count("\n", 0, m.start()) + 1, m.group(1).rstrip(".")


def module_references():
    """(doc, line, dotted name) of each rtagent module name a document uses."""
    for doc in docs():
        text = doc.path.read_text()
        for m in _DOTTED.finditer(text):
            yield doc, text.count("\n", 0, m.start()) + 1, m.group(1)


def _is_module(dotted):
    parts = dotted.split(".")
    # The longest prefix that is a module or a package: a module may be
    # followed by a name it defines (a function, a method); a package by
    # nothing (its lowercase names are its modules).
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        if base.with_suffix(".py").is_file():
            return len(parts) - end <= 2
        if (base / "__init__.py").is_file():
            return end == len(parts)
    return False


def test_every_path_named_exists():
    missing = [
        f"{doc.name}:{line}: {path}"
        for doc, line, path in path_references()
        if not (ROOT / path).exists() and not any(ch in path for ch in "*<{")
    ]
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def test_every_module_named_exists():
    missing = [
        f"{doc.name}:{line}: {name}"
        for doc, line, name in module_references()
        if not any(name == n or name.startswith(n + ".") for n in NOT_MODULES)
        and not _is_module(name)
    ]
    assert not missing, "modules that do not exist:\n" + "\n".join(missing)


# -- the code's layout (docs/layout.md) -------------------------------------


def _layout():
    """The first fenced block of docs/layout.md (the README's Layout
    section until issue 51)."""
    page = _read(ROOT / "docs" / "layout.md")
    return page.fences[0][2]


def test_the_layout_names_what_is_there():
    """Every path the layout block starts a line with exists; every package
    and top-level module of rtagent/, and every docs/*.md, is named."""
    layout = _layout()
    named = re.findall(r"^(\S+)", layout, re.M)
    missing = [p for p in named if not (ROOT / p).exists()]
    assert not missing, f"docs/layout.md names paths that do not exist: {missing}"
    words = set(re.findall(r"[\w./-]+", layout))
    package = ROOT / "rtagent"
    unnamed = [
        f"rtagent/{p.name}/" if p.is_dir() else f"rtagent/{p.name}"
        for p in sorted(package.iterdir())
        if (p.is_dir() and (p / "__init__.py").exists() and f"rtagent/{p.name}/" not in named)
        or (
            p.suffix == ".py"
            and p.name != "__init__.py"
            and f"rtagent/{p.name}" not in named
            and p.name not in words
        )
    ]
    assert not unnamed, f"docs/layout.md omits: {unnamed}"
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    docs_line = layout[layout.index("docs/ ") :]
    assert pages <= set(re.findall(r"[\w-]+\.md", docs_line)), "docs/layout.md omits docs pages"


def test_the_checks_find_what_they_check():
    # A reader that found nothing would pass every check above.
    assert len(list(option_references())) > 150
    assert len({t for _d, _l, t in make_references()}) >= 10
    assert len(list(command_references())) > 20
    assert len(list(version_references())) > 30
    assert len(list(path_references())) > 100
    assert len(list(module_references())) > 50
