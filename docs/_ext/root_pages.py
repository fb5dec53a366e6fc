"""mkdocs hook: the repository's own Markdown files as pages of the site.

The README is the front page, BENCHMARKS.md, CHANGELOG.md and
saved_models/README.md are pages, each read where it lives (nothing is
copied into docs/). Their links are written for GitHub, relative to their
own folder; here every relative link of every page is resolved in the
repository and pointed at the page or file that the site has for it: a
page of docs/ or one of the files above, an image they show, or else the
file on GitHub. A link to nothing is left as it is, so that
`mkdocs build --strict` fails on it.
"""

import os
import posixpath
import re

from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))

# Repository path -> path in the site.
ROOT_PAGES = {
    "README.md": "index.md",
    "BENCHMARKS.md": "benchmarks.md",
    "CHANGELOG.md": "changelog.md",
    "saved_models/README.md": "saved-models.md",
}
# Images that the pages above show, published at their repository path.
ASSET_FOLDERS = ("benchmarks",)
ASSET_SUFFIXES = (".png", ".svg")

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", flags=re.M | re.S)
_LINK = re.compile(r"(!?\[[^\]\n]*\]\()([^)\s]+)(\))")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def on_files(files, config):
    for repo_path, site_path in ROOT_PAGES.items():
        files.append(
            File.generated(
                config, site_path, abs_src_path=os.path.join(ROOT, repo_path)
            )
        )
    for folder in ASSET_FOLDERS:
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(ASSET_SUFFIXES):
                path = os.path.join(ROOT, folder, name)
                files.append(
                    File.generated(
                        config, f"{folder}/{name}", abs_src_path=path
                    )
                )
    return files


def _repo_path(page):
    """Where the page's Markdown lives in the repository."""
    for repo_path, site_path in ROOT_PAGES.items():
        if page.file.src_uri == site_path:
            return repo_path
    return f"docs/{page.file.src_uri}"


def _site_target(target, config):
    """The site path (or URL) of a repository path, or None."""
    if target in ROOT_PAGES:
        return ROOT_PAGES[target]
    if target.startswith("docs/"):
        return target[len("docs/") :]
    folder = posixpath.dirname(target)
    if folder in ASSET_FOLDERS and target.endswith(ASSET_SUFFIXES):
        return target
    if os.path.exists(os.path.join(ROOT, target)):
        kind = "tree" if os.path.isdir(os.path.join(ROOT, target)) else "blob"
        return f"{config.repo_url.rstrip('/')}/{kind}/main/{target}"
    return None


def _rewrite(text, repo_path, site_path, config):
    def link(match):
        target = match.group(2)
        if target.startswith(("#", "/")) or _SCHEME.match(target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = posixpath.normpath(
            posixpath.join(posixpath.dirname(repo_path), path)
        )
        site = _site_target(resolved, config)
        if site is None:
            return match.group(0)
        if not _SCHEME.match(site):
            site = posixpath.relpath(site, posixpath.dirname(site_path) or ".")
        new = site + (f"#{anchor}" if anchor else "")
        return match.group(1) + new + match.group(3)

    return _LINK.sub(link, text)


def on_page_markdown(markdown, page, config, files):
    repo_path = _repo_path(page)
    pieces = []
    last = 0
    for fence in _FENCE.finditer(markdown):
        pieces.append(
            _rewrite(
                markdown[last : fence.start()],
                repo_path,
                page.file.src_uri,
                config,
            )
        )
        pieces.append(fence.group(0))
        last = fence.end()
    pieces.append(
        _rewrite(markdown[last:], repo_path, page.file.src_uri, config)
    )
    return "".join(pieces)
