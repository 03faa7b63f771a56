# Copyright 2026 The async_rl_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
The documentation stays true: links, commands and the generated parameter reference.

* Every relative link of ``README.md`` and ``docs/*.md`` names an existing file, and every
  ``#anchor`` a heading of its target (GitHub's slug rules).
* Every command in a ``bash``/``sh``/``shell``/``console`` (or unlabelled) fenced block, and
  every inline code span that starts with one, that names a project CLI (``async-rl-train``,
  ``async-rl-preflight``), a bench script (``python bench/X.py``) or a ``make`` target exists:
  the script file exists, each ``--option`` is in that command's ``--help``, each ``make``
  target is in the Makefile (``make train ARGS="..."`` is checked as ``async-rl-train``), and
  each ``--set KEY=VALUE`` names a real option. A ``text`` block (shown output, a deliberate
  mistake) is not checked.
* ``docs/parameters.md`` is what ``python -m async_rl_ros.core.config`` prints.
"""

import functools
import pathlib
import re
import shlex
import subprocess
import sys

from async_rl_ros.core.config import NODE_SECTIONS
from conftest import REPO
import pytest

ROOT = REPO
PACKAGE = ROOT / 'async_rl_ros'

if not (ROOT / 'README.md').is_file() or not (ROOT / 'docs').is_dir():
    pytest.skip('README.md and docs/ are not next to this package (an installed copy)',
                allow_module_level=True)

#: project CLI -> the module whose ``--help`` lists its options.
CLI_MODULES = {
    'async-rl-train': 'async_rl_ros.local.cli',
    'async-rl-preflight': 'async_rl_ros.envs.preflight',
}
#: ``make`` targets that run a project CLI with ``ARGS``.
MAKE_ARGS_CLI = {'train': 'async-rl-train'}
CHECKED_FENCES = {'', 'bash', 'sh', 'shell', 'console'}
SEPARATORS = {'|', '||', '&&', ';', '&', '>', '2>&1', '>>'}

_LINK = re.compile(r'(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)|!\[[^\]]*\]\(([^)\s]+)\)')
_FENCE = re.compile(r'^(\s*)(```+|~~~+)\s*([\w+-]*)')
_INLINE = re.compile(r'(?<!`)`([^`\n]+)`(?!`)')
_OPTION = re.compile(r'(?<![\w-])--[A-Za-z][\w-]*')
_BENCH = re.compile(r'(?:^|/)bench/[\w-]+\.py$')


# ---------------------------------------------------------------------------- markdown parts
def doc_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Return the documentation files the check covers: README.md and docs/*.md."""
    return [root / 'README.md'] + sorted((root / 'docs').glob('*.md'))


def split_fences(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """
    Split markdown into prose lines and fenced blocks.

    :returns: ``(prose_lines, [(info_string, lines), ...])``.
    """
    prose: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    fence = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence, info, body = m.group(2), m.group(3).lower(), []
            else:
                prose.append(line)
        elif line.strip().startswith(fence) and not line.strip()[len(fence):].strip():
            blocks.append((info, body))
            fence = None
        else:
            body.append(line)
    return prose, blocks


def paragraphs(text: str) -> list[str]:
    """Return the prose outside fenced blocks, one string per paragraph, lines joined by ' '."""
    prose, _ = split_fences(text)
    return [' '.join(p.split('\n')) for p in '\n'.join(prose).split('\n\n')]


def github_slug(heading: str) -> str:
    """Return the anchor GitHub gives a heading: lowercase, punctuation dropped, '-' for ' '."""
    text = re.sub(r'<[^>]+>', '', heading.strip())
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)  # a link in a heading: its text
    text = text.replace('`', '').lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def anchors(text: str) -> set[str]:
    """Return every heading anchor of a markdown text (duplicates get -1, -2, ...)."""
    prose, _ = split_fences(text)
    seen: dict[str, int] = {}
    out = set()
    for line in prose:
        m = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f'{slug}-{n}')
    return out


def links(text: str) -> list[str]:
    """Return the link targets of the prose (fenced blocks and inline code excluded)."""
    found = []
    for para in paragraphs(text):
        para = _INLINE.sub('', para)
        for m in _LINK.finditer(para):
            found.append(m.group(1) or m.group(2))
    return found


def link_problems(path: pathlib.Path) -> list[str]:
    """Return one line per relative link of ``path`` whose file or heading does not exist."""
    problems = []
    for target in links(path.read_text(encoding='utf-8')):
        if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition('#')
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f'{path.name}: link {target!r}: no file {file_part!r}')
            continue
        if anchor and dest.suffix == '.md':
            if anchor not in anchors(dest.read_text(encoding='utf-8')):
                problems.append(f'{path.name}: link {target!r}: no heading #{anchor} in '
                                f'{dest.name}')
    return problems


# ---------------------------------------------------------------------------- commands
def command_lines(text: str) -> list[str]:
    """Return the shell lines of the checked fenced blocks and the inline code spans."""
    _, blocks = split_fences(text)
    lines = []
    for info, body in blocks:
        if info not in CHECKED_FENCES:
            continue
        joined = '\n'.join(body).replace('\\\n', ' ')
        for line in joined.splitlines():
            line = line.strip()
            if line.startswith('$ '):
                line = line[2:]
            lines.append(line)
    for para in paragraphs(text):
        lines.extend(m.group(1) for m in _INLINE.finditer(para))
    return lines


def _tokens(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in shown output: plain words
        return line.split('#')[0].split()


def _arguments(tokens: list[str], start: int) -> list[str]:
    """Return the tokens after ``start`` up to a shell separator."""
    out = []
    for tok in tokens[start:]:
        if tok in SEPARATORS:
            break
        out.append(tok)
    return out


def find_commands(line: str) -> list[tuple[str, list[str]]]:
    """
    Return the project commands of one shell line with their arguments.

    :returns: ``[(command, args)]``; command is a CLI name, ``bench/X.py`` or ``make``.
    """
    tokens = _tokens(line)
    found = []
    for i, tok in enumerate(tokens):
        name = tok.rsplit('/', 1)[-1]
        if name in CLI_MODULES:
            found.append((name, _arguments(tokens, i + 1)))
        elif _BENCH.search(tok) and i > 0 and re.search(r'python[\d.]*$', tokens[i - 1]):
            found.append(('bench/' + tok.rsplit('bench/', 1)[1], _arguments(tokens, i + 1)))
        elif tok == 'make' and (i == 0 or tokens[i - 1] in SEPARATORS):
            found.append(('make', _arguments(tokens, i + 1)))
    return found


def set_key_known(key: str) -> bool:
    """Return whether ``--set KEY=...`` names an option: ``node.dotted.name`` or a bare name."""
    known = {node: {name for name, *_ in cls.options()} for node, cls in NODE_SECTIONS.items()}
    node, _, rest = key.partition('.')
    if node in known and rest in known[node]:
        return True
    return any(key in names for names in known.values())


def makefile_targets(root: pathlib.Path = ROOT) -> set[str]:
    """Return the targets the Makefile defines."""
    text = (root / 'Makefile').read_text(encoding='utf-8')
    return set(re.findall(r'^([A-Za-z][\w.-]*)\s*:(?!=)', text, re.M))


@functools.lru_cache(maxsize=None)
def help_options(command: str) -> frozenset[str]:
    """Return the ``--options`` a command's ``--help`` prints (one subprocess per command)."""
    if command in CLI_MODULES:
        argv = [sys.executable, '-m', CLI_MODULES[command], '--help']
    else:
        argv = [sys.executable, command, '--help']
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f'{command} --help failed:\n{out.stdout}{out.stderr}'
    return frozenset(_OPTION.findall(out.stdout))


def argument_problems(command: str, args: list[str], root: pathlib.Path = ROOT,
                      options=help_options) -> list[str]:
    """
    Check one command's arguments against what the project has.

    :param options: ``command -> set of --options`` (its ``--help``).
    :returns: one line per problem.
    """
    problems = []
    if command == 'make':
        targets = makefile_targets(root)
        for arg in args:
            if '=' in arg:
                var, _, value = arg.partition('=')
                cli = next((MAKE_ARGS_CLI[a] for a in args if a in MAKE_ARGS_CLI), None)
                if var == 'ARGS' and cli:
                    problems += argument_problems(cli, _tokens(value), root, options)
            elif not arg.startswith('-') and arg not in targets:
                problems.append(f'make {arg}: no such target in the Makefile')
        return problems
    if command.startswith('bench/') and not (root / command).is_file():
        return [f'{command}: no such script']
    known = options(command)
    for i, arg in enumerate(args):
        if not arg.startswith('--'):
            continue
        opt, eq, value = arg.partition('=')
        if opt not in known:
            problems.append(f'{command} {opt}: not an option of its --help')
        if opt == '--set':
            key_value = value if eq else (args[i + 1] if i + 1 < len(args) else '')
            key = key_value.partition('=')[0]
            if not set_key_known(key):
                problems.append(f'{command} --set {key}: no such option')
    return problems


def command_problems(path: pathlib.Path, root: pathlib.Path = ROOT,
                     options=help_options) -> list[str]:
    """Return one line per stale command of a markdown file."""
    problems = []
    for line in command_lines(path.read_text(encoding='utf-8')):
        for command, args in find_commands(line):
            problems += [f'{path.name}: {p} (in {line!r})'
                         for p in argument_problems(command, args, root, options)]
    return problems


# ---------------------------------------------------------------------------- the checks
@pytest.mark.parametrize('path', doc_files(), ids=lambda p: p.name)
def test_links_resolve(path):
    assert link_problems(path) == []


@pytest.mark.parametrize('path', doc_files(), ids=lambda p: p.name)
def test_commands_exist(path):
    assert command_problems(path) == []


def test_the_docs_name_commands():
    """The command check must see something, or a parser change would turn it off."""
    seen = {c for p in doc_files() for line in command_lines(p.read_text(encoding='utf-8'))
            for c, _ in find_commands(line)}
    assert {'async-rl-train', 'async-rl-preflight', 'make'} <= seen
    assert any(c.startswith('bench/') for c in seen)


def test_parameters_md_is_generated():
    out = subprocess.run([sys.executable, '-m', 'async_rl_ros.core.config'], cwd=PACKAGE,
                         capture_output=True, text=True, timeout=120, check=True)
    assert (ROOT / 'docs' / 'parameters.md').read_text(encoding='utf-8') == out.stdout, \
        'docs/parameters.md is stale: python -m async_rl_ros.core.config > docs/parameters.md'


# ---------------------------------------------------------------------------- the checker
def _fake_options(command):
    return frozenset({'--steps', '--set', '--resume'})


def test_slugs_follow_github():
    assert github_slug('The physical UR5 (ur_rtde)') == 'the-physical-ur5-ur_rtde'
    assert github_slug('Tests with ROS 2') == 'tests-with-ros-2'
    assert github_slug('`make test`: what CI runs') == 'make-test-what-ci-runs'
    assert anchors('# A\n```\n# not a heading\n```\n## A\n') == {'a', 'a-1'}


def test_a_stale_link_fails(tmp_path):
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'guide.md').write_text('# Guide\n\n## Real part\n', encoding='utf-8')
    readme = tmp_path / 'README.md'
    readme.write_text('[ok](docs/guide.md#real-part) [web](https://example.org/x)\n'
                      '`[not a link](gone.md)`\n', encoding='utf-8')
    assert link_problems(readme) == []
    readme.write_text('[gone](docs/gone.md) [anchor](docs/guide.md#old-part) [self](#nope)\n',
                      encoding='utf-8')
    problems = link_problems(readme)
    assert len(problems) == 3
    assert 'docs/gone.md' in problems[0] and '#old-part' in problems[1]


def test_a_stale_option_fails(tmp_path):
    (tmp_path / 'bench').mkdir()
    (tmp_path / 'bench' / 'b.py').write_text('', encoding='utf-8')
    (tmp_path / 'Makefile').write_text('train: x\n\tdo\ntest:\n\tdo\nX := 1\n', encoding='utf-8')
    doc = tmp_path / 'guide.md'
    doc.write_text('```bash\nasync-rl-train --steps 10 --set learner.sac.gamma=0.9 \\\n'
                   '    --set task.control_hz=50   # a comment --gone\n'
                   'python bench/b.py --steps 3\nmake train ARGS="--resume"\n```\n'
                   '```text\n$ async-rl-train --set task.contrl_hz=50\n```\n',
                   encoding='utf-8')
    assert command_problems(doc, tmp_path, _fake_options) == []
    doc.write_text('```bash\n$ .venv/bin/async-rl-train --stepz 10 --set learner.sac.gama=1\n'
                   'python bench/gone.py\nmake trian && make train ARGS="--resum"\n```\n'
                   'Then, wrapped, `async-rl-train\n--set=rtde.robot_ipp=1`.\n', encoding='utf-8')
    problems = command_problems(doc, tmp_path, _fake_options)
    assert len(problems) == 6, problems
    for word in ('--stepz', 'learner.sac.gama', 'bench/gone.py', 'make trian', '--resum',
                 'rtde.robot_ipp'):
        assert any(word in p for p in problems), word


def test_real_help_is_read():
    assert {'--resume', '--set', '--task'} <= help_options('async-rl-train')
    assert '--robot-ip' in help_options('async-rl-preflight')
    assert set_key_known('learner.sac.gamma') and set_key_known('backend')
    assert not set_key_known('learner.sac.gama')
