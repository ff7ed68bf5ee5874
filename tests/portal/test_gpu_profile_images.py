"""GPU profiles compute on the GPU (issue 37 item 5): the seed command puts the GPU profiles
on the image it is given (deskpool/studio-cuda where it is built) and says which image holds
which PyTorch; the console's profile form names the known images' PyTorch builds; a desktop's
own page says when its PyTorch is a CPU build, and when its GPU is cordoned."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import translation

from nodeagent.software import DESKTOP_IMAGE, STUDIO_CUDA_IMAGE, STUDIO_IMAGE
from portal.console.queue_forms import ProfileForm
from scheduling.models import DesktopProfile, Gpu
from scheduling.services.gpu_cordon import do_cordon_gpu
from tests.portal.student.test_limit_pages import desktop_page, signed_in
from tests.scheduling.test_lifecycle import run_desktop

pytestmark = pytest.mark.django_db

CPU_NOTE = 'id="desktop-torch-cpu"'
GPU_NOTE = 'id="desktop-gpu-cordoned"'


def seed(*args: str) -> str:
    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def test_where_studio_cuda_is_built_the_gpu_profiles_use_it() -> None:
    said = seed("--gpu-image", STUDIO_CUDA_IMAGE)
    for profile in DesktopProfile.objects.all():
        if profile.gpu_count:
            assert profile.image == STUDIO_CUDA_IMAGE, profile.slug
        else:
            assert profile.image == DESKTOP_IMAGE
    painting = DesktopProfile.objects.get(slug="ai-painting")
    assert "PyTorch (CUDA build)" in painting.description
    assert "CPU build" not in painting.description
    assert f"{STUDIO_CUDA_IMAGE} holds PyTorch's CUDA build" in said


def test_without_it_the_seed_says_the_gpu_profiles_compute_on_the_cpu() -> None:
    said = seed()
    assert DesktopProfile.objects.get(slug="ai-painting").image == STUDIO_IMAGE
    assert f"{STUDIO_IMAGE} holds PyTorch's CPU build" in said
    assert f"--gpu-image {STUDIO_CUDA_IMAGE}" in said


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_profile_form_says_which_image_holds_which_pytorch(language) -> None:
    with translation.override(language):
        help_text = str(ProfileForm()["image"].help_text)
        cuda = translation.gettext("PyTorch's CUDA build, computes on the GPU")
        cpu = translation.gettext("PyTorch's CPU build, computes on the CPU only")
    assert f"{STUDIO_CUDA_IMAGE}: {cuda}" in help_text
    assert f"{STUDIO_IMAGE}: {cpu}" in help_text


def test_the_console_profile_page_shows_it(admin_user) -> None:
    browser = Client()
    browser.force_login(admin_user)
    page = browser.get("/console/profiles/").content.decode()
    assert f"{STUDIO_CUDA_IMAGE}: PyTorch&#x27;s CUDA build, computes on the GPU" in page


@pytest.mark.parametrize(
    ("image", "noted"), [(STUDIO_IMAGE, True), (STUDIO_CUDA_IMAGE, False), ("x/own:1", False)]
)
def test_a_desktop_page_says_when_its_pytorch_is_a_cpu_build(owner, profile, pool, image, noted):
    DesktopProfile.objects.filter(pk=profile.pk).update(image=image)
    profile.refresh_from_db()
    session = run_desktop(owner, profile)
    html = desktop_page(signed_in(owner), session)
    assert (CPU_NOTE in html) is noted


def test_a_desktop_on_a_cordoned_gpu_says_so_on_its_page(owner, profile, pool):
    session = run_desktop(owner, profile)
    client = signed_in(owner)
    assert GPU_NOTE not in desktop_page(client, session)
    gpu = Gpu.objects.get(slices__allocation__session=session)
    do_cordon_gpu(gpu, "health", ["xid:79"])
    assert GPU_NOTE in desktop_page(client, session)
