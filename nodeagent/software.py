"""What each desktop image holds, and how to ask each program its version.

One list for three readers: the desktop profiles name programs from it (their descriptions
say only what the image has, ``portal/management/commands/seed_demo.py``), the image test
runs every version command inside the image it is listed for
(``tests/nodeagent/test_studio_image.py``), and nodeagent/images/README.md describes it.
"""

from __future__ import annotations

from dataclasses import dataclass

DESKTOP_IMAGE = "deskpool/desktop:latest"
STUDIO_IMAGE = "deskpool/studio:latest"
# The studio with PyTorch's CUDA build, for GPU nodes (build.sh studio-cuda).
STUDIO_CUDA_IMAGE = "deskpool/studio-cuda:latest"


@dataclass(frozen=True)
class Program:
    """A program a person can open on the desktop."""

    name: str  # as a profile's description names it
    version_command: tuple[str, ...]  # prints its version and exits 0, no display needed


PROGRAMS: dict[str, Program] = {
    "terminal": Program("a terminal", ("xfce4-terminal", "--version")),
    "firefox": Program("Firefox", ("firefox-esr", "--version")),
    "pytorch": Program(
        "PyTorch (CPU build)", ("python3", "-c", "import torch; print(torch.__version__)")
    ),
    "pytorch-cuda": Program(
        "PyTorch (CUDA build)",
        (
            "python3",
            "-c",
            "import torch; assert torch.version.cuda; print(torch.__version__, torch.version.cuda)",
        ),
    ),
    "jupyter": Program("Jupyter Notebook", ("jupyter-notebook", "--version")),
    "blender": Program("Blender", ("blender", "--background", "--factory-startup", "--version")),
    "pinyin": Program(
        "pinyin input (fcitx5)",
        ("sh", "-c", "fcitx5 --version && test -e /usr/share/fcitx5/inputmethod/pinyin.conf"),
    ),
}

# The programs of each image, in the order a description names them.
IMAGE_PROGRAMS: dict[str, tuple[str, ...]] = {
    # Pinyin input is in every desktop image (Dockerfile.desktop), studio's included.
    DESKTOP_IMAGE: ("terminal", "pinyin"),
    STUDIO_IMAGE: ("terminal", "firefox", "pytorch", "jupyter", "blender", "pinyin"),
    STUDIO_CUDA_IMAGE: ("terminal", "firefox", "pytorch-cuda", "jupyter", "blender", "pinyin"),
}


# Which PyTorch each known image holds, as its Dockerfile labels it (LABEL deskpool.torch):
# "cuda" computes on the GPU, "cpu" only on the CPU whatever slice the desktop holds. The
# seed command, the console's profile form and a desktop's own page say it.
TORCH_LABEL = "deskpool.torch"
IMAGE_TORCH: dict[str, str] = {STUDIO_IMAGE: "cpu", STUDIO_CUDA_IMAGE: "cuda"}


def torch_build(image: str) -> str | None:
    """The PyTorch build ("cuda" or "cpu") of an image known to hold one; else None."""
    return IMAGE_TORCH.get(image)


def programs_of(image: str) -> tuple[str, ...]:
    """The keys of the programs ``image`` holds; none for an image not listed here."""
    return IMAGE_PROGRAMS.get(image, ())


def named(keys: tuple[str, ...] | list[str]) -> str:
    """The programs' names as a description lists them: "A, B and C"."""
    names = [PROGRAMS[key].name for key in keys]
    if len(names) < 2:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]
