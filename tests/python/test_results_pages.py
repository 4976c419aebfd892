"""The results pages (bench/*.md) name the raw output behind every measured figure (issue 43).

The convention, also in docs/testing.md ("Results pages and their raw output"):

1. Every markdown table of a bench/*.md page whose body states a number (a digit that is not
   part of a name such as fp16) is followed, after a blank line, by a paragraph beginning
   `Raw:` (the table's footnote; it may wrap over several lines). It is one of
   - `Raw: bench/results/<dir>/<file>, ...`: the raw output behind every row (at least one
     path; each must exist; `{a,b}` and `*` are expanded);
   - `Raw: none — computed ...`: the figures are computed by a deterministic command on the
     page (the cost model's predictions, a formula), not measured;
   - `Raw: none — not a measurement ...`: the table describes (options, kinds, settings);
   - `Raw: none — no raw output kept; to be rerun ...`: measured figures whose output was
     not kept. They must not be quoted as a headline (README, docs).
   A row may name its own file instead (a `bench/results/...` path in one of its cells), or
   say `no raw output` in a cell, which marks that row alone as unbacked.
2. Every `bench/results/...` path named in README.md, docs/*.md and bench/*.md exists (in
   bench/*.md a bare `results/...` is read as bench/results/...).
3. Every file under bench/results/ is named (by a backticked name or pattern relative to
   the README's folder) in a README.md of its folder or of a folder above it inside
   bench/results/, which records the command and the commit that produced it.
4. Every link from README.md to a section of a bench page (`bench/X.md#anchor`) resolves.

No import of layerps: this runs on a bare Python with pytest (the unit tier).
"""

import fnmatch
import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
PAGES = sorted(BENCH.glob("*.md"))

NONE_REASONS = ("computed", "not a measurement", "no raw output kept")
ROW_MARK = "no raw output"
# A number standing alone (not part of a name like fp16 or run1): a digit not preceded by a
# letter, digit, underscore or dot.
NUMBER = re.compile(r"(?<![\w.])\d")
PATH = re.compile(r"(?:bench/)?results/[\w.\-/{},*]*")


def expand_braces(pattern):
    """`a{b,c}d` -> [abd, acd]; several brace groups multiply."""
    parts = re.split(r"(\{[^{}]*\})", pattern)
    choices = [p[1:-1].split(",") if p.startswith("{") and p.endswith("}") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def existing(path, root=REPO):
    """The files or folders a repository path (possibly with braces or *) names."""
    found = []
    for p in expand_braces(path):
        found.extend(root.glob(p) if "*" in p else ([root / p] if (root / p).exists() else []))
    return found


def result_paths(text, bare_results):
    """The bench/results/... paths a text names (bare results/... too for bench pages)."""
    out = []
    for m in PATH.finditer(text):
        p = m.group(0).rstrip(".,:;)")
        start = m.start()
        if not p.startswith("bench/"):
            before = text[start - 1] if start > 0 else " "
            if not bare_results or before.isalnum() or before in "/_.-":
                continue
            p = "bench/" + p
        if p.rstrip("/") in ("bench/results",) or p.startswith("bench/results/"):
            out.append(p)
    return out


def tables(text):
    """(first line number, table lines, footnote or None) of every markdown table outside
    fenced code blocks; the footnote is the paragraph after the table's blank line(s)."""
    lines = text.split("\n")
    fenced = False
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        if s.startswith("```"):
            fenced = not fenced
            i += 1
            continue
        if not fenced and s.startswith("|") and i + 1 < len(lines) and \
                re.match(r"^\|[\s:|-]+\|$", lines[i + 1].strip()):
            j = i
            while j < len(lines) and lines[j].strip().startswith("|"):
                j += 1
            k = j
            while k < len(lines) and not lines[k].strip():
                k += 1
            foot = None
            if j < k < len(lines):  # the paragraph after the blank line(s)
                end = k
                while end < len(lines) and lines[end].strip() and not lines[end].strip().startswith("|"):
                    end += 1
                foot = " ".join(l.strip() for l in lines[k:end])
            yield i + 1, lines[i:j], foot
            i = j
        else:
            i += 1


def numeric(row):
    return NUMBER.search(row) is not None


def check_page(page, root=REPO):
    """The problems of one page's tables, as strings (empty: the page follows the rule)."""
    problems = []
    rel = page.relative_to(root)
    for line, rows, foot in tables(page.read_text()):
        body = [r for r in rows[2:] if numeric(r)]
        if not body:
            continue
        where = f"{rel}:{line}"
        foot_paths, foot_ok = [], False
        if foot is not None and foot.startswith("Raw:"):
            foot_paths = result_paths(foot, bare_results=True)
            if foot.startswith("Raw: none"):
                if any(r in foot for r in NONE_REASONS):
                    foot_ok = True
                else:
                    problems.append(f"{where}: 'Raw: none' without a reason ({', '.join(NONE_REASONS)})")
            elif foot_paths:
                foot_ok = True
            else:
                problems.append(f"{where}: the Raw: line names no bench/results path")
            for p in foot_paths:
                if not existing(p, root):
                    problems.append(f"{where}: {p} (named by the table's Raw: line) does not exist")
        unbacked = []
        for r in body:
            own = result_paths(r, bare_results=True)
            for p in own:
                if not existing(p, root):
                    problems.append(f"{where}: {p} (named by a row) does not exist")
            if not (own or ROW_MARK in r or foot_ok):
                unbacked.append(r.strip())
        if unbacked:
            problems.append(f"{where}: {len(unbacked)} row(s) state a figure but name no raw output "
                            f"(no bench/results path or '{ROW_MARK}' in the row, no valid 'Raw:' line "
                            f"after the table and a blank line); first: {unbacked[0][:80]}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_table_row_names_its_raw_output(page):
    problems = check_page(page)
    assert not problems, "\n".join(problems)


def documents():
    return [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md")) + PAGES


@pytest.mark.parametrize("doc", documents(), ids=[str(d.relative_to(REPO)) for d in documents()])
def test_every_raw_output_path_named_exists(doc):
    text = doc.read_text()
    missing = sorted({p for p in result_paths(text, bare_results=doc.parent == BENCH) if not existing(p)})
    assert not missing, f"{doc.relative_to(REPO)} names raw output that does not exist: {missing}"


def test_every_raw_file_is_indexed_in_a_readme():
    """Each file under bench/results/ is named in a README.md of its folder or one above."""
    patterns = {}
    for readme in RESULTS.rglob("README.md"):
        names = re.findall(r"`([^`\s]+)`", readme.read_text())
        patterns[readme.parent] = [q for n in names for q in expand_braces(n)]
    unindexed = []
    for f in sorted(RESULTS.rglob("*")):
        if not f.is_file() or f.name == "README.md":
            continue
        ok = False
        for folder in [f.parent] + list(f.parent.parents):
            if folder in patterns:
                rel = str(f.relative_to(folder))
                if any(fnmatch.fnmatch(rel, p) or rel == p.rstrip("/") for p in patterns[folder]):
                    ok = True
                    break
            if folder == RESULTS:
                break
        if not ok:
            unindexed.append(str(f.relative_to(REPO)))
    assert not unindexed, "raw files named in no README.md under bench/results/: " + ", ".join(unindexed)


def github_anchor(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped (letters, digits,
    '-', '_' and spaces kept), spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page):
    seen, out = {}, set()
    fenced = False
    for line in page.read_text().split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not re.match(r"^#{1,6} ", line):
            continue
        a = github_anchor(line.lstrip("#"))
        n = seen.get(a, 0)
        out.add(a if n == 0 else f"{a}-{n}")
        seen[a] = n + 1
    return out


def test_readme_links_to_bench_sections_resolve():
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\((bench/[\w.\-]+\.md)#([^)\s]+)\)", text)
    assert links, "README.md links to no section of a results page"
    broken = [f"{p}#{a}" for p, a in links if not (REPO / p).exists() or a not in anchors(REPO / p)]
    assert not broken, f"README.md links to sections that do not exist: {broken}"


def test_the_check_fails_on_a_row_without_raw_output(tmp_path):
    """The rule can fail: a table without a Raw: line, one naming a missing file, and
    'Raw: none' without a reason are each reported; a marked row is not."""
    page = tmp_path / "PAGE.md"
    page.write_text("\n".join([
        "| a | b |", "|---|---|", "| x | 1.5 |", "",
        "text", "",
        "| a | b |", "|---|---|", "| x | 2 |", "", "Raw: `bench/results/no-such-file.txt`.", "",
        "| a | b |", "|---|---|", "| x | 3 |", "", "Raw: none.", "",
        "| a | b |", "|---|---|", "| x | 4 (no raw output kept) |", "",
        "| a | b |", "|---|---|", "| x | y |", "",
    ]))
    problems = check_page(page, root=tmp_path)
    flagged = {int(p.split(":")[1]) for p in problems}
    assert flagged == {1, 7, 13}, problems
    assert any(p.startswith("PAGE.md:1:") and "name no raw output" in p for p in problems)
    assert any(p.startswith("PAGE.md:7:") and "does not exist" in p for p in problems)
    assert any(p.startswith("PAGE.md:13:") and "without a reason" in p for p in problems)
