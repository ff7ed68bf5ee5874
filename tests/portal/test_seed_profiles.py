"""The demo's desktop profiles say only what their image holds (issue 27).

Each profile's description names programs of nodeagent.software, and only those listed for
the profile's image; tests/nodeagent/test_studio_image.py runs every listed program's version
command inside that image.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command

from nodeagent.software import DESKTOP_IMAGE, PROGRAMS, STUDIO_IMAGE, programs_of
from scheduling.models import DesktopProfile

pytestmark = pytest.mark.django_db

# What the profiles once promised without the image having it.
NOT_IN_ANY_IMAGE = ("Stable Diffusion", "3D Slicer", "MONAI")


def named_programs(description: str) -> set[str]:
    return {key for key, program in PROGRAMS.items() if program.name in description}


def test_each_profile_names_only_programs_its_image_holds() -> None:
    call_command("seed_demo", verbosity=0)
    profiles = list(DesktopProfile.objects.order_by("slug"))
    assert {p.image for p in profiles} == {DESKTOP_IMAGE, STUDIO_IMAGE}
    for profile in profiles:
        named = named_programs(profile.description)
        assert named, profile.description  # every profile says what it offers
        assert named <= set(programs_of(profile.image)), (profile.slug, profile.description)
        assert not any(word in profile.description for word in NOT_IN_ANY_IMAGE)
    blender = DesktopProfile.objects.get(slug="3d-modelling")
    assert "Blender" in blender.description and blender.image == STUDIO_IMAGE


def test_one_image_for_all_drops_what_that_image_lacks() -> None:
    call_command("seed_demo", "--image", DESKTOP_IMAGE, verbosity=0)
    for profile in DesktopProfile.objects.all():
        assert profile.image == DESKTOP_IMAGE
        assert named_programs(profile.description) <= {"terminal"}, profile.description
    assert "Blender" not in DesktopProfile.objects.get(slug="3d-modelling").description
