"""Create the demo accounts, a course and the desktop catalogue. Idempotent."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from nodeagent.software import (
    DESKTOP_IMAGE,
    IMAGE_TORCH,
    STUDIO_CUDA_IMAGE,
    STUDIO_IMAGE,
    named,
    programs_of,
)
from people.models import Course, Member, Role
from scheduling.models import DesktopProfile, PoolPolicy, Quota, set_default_profile
from scheduling.services.eligibility import active_thesis_grant
from scheduling.services.grants import check_grant, do_grant
from scheduling.services.teaching import TA_PERMISSIONS, check_ta, do_set_ta

# Defaults an admin edits in the console (/admin/): every user may hold two desktops at once
# and use 40 GPU-hours (compute units x hours) a week; the demo course 200 a week.
QUOTAS = [
    {"scope": "user", "key": "*", "max_sessions": 2, "max_gpu_hours_week": 40.0},
    {"scope": "course", "key": "cs-gpu101", "max_gpu_hours_week": 200.0},
]

# Each profile: what it is for, the image, and the programs of that image its description
# names (nodeagent.software; tests/nodeagent/test_studio_image.py runs each in its image).
PROFILES: list[dict[str, Any]] = [
    {
        "slug": "ai-painting",
        "name": "AI painting",
        "lead": "Image generation in notebooks on a 4 GB-class GPU slice.",
        "image": STUDIO_IMAGE,
        "software": ["pytorch", "jupyter", "firefox"],
        "cpus": 2,
        "memory_mb": 4096,
        "gpu_count": 1,
        "gpu_memory_min_mb": 3840,
        "allowed_kinds": ["share", "mig"],
    },
    {
        "slug": "3d-modelling",
        "name": "3D modelling",
        "lead": "3D modelling with at least 8 GB of GPU memory.",
        "image": STUDIO_IMAGE,
        "software": ["blender"],
        "cpus": 2,
        "memory_mb": 8192,
        "gpu_count": 1,
        "gpu_memory_min_mb": 8192,
        "allowed_kinds": ["mig", "whole"],
    },
    {
        "slug": "medical-imaging",
        "name": "Medical imaging",
        "lead": "Deep learning on medical images with 16 GB or more of GPU memory.",
        "image": STUDIO_IMAGE,
        "software": ["pytorch", "jupyter"],
        "cpus": 2,
        "memory_mb": 8192,
        "gpu_count": 1,
        "gpu_memory_min_mb": 16384,
        "allowed_kinds": ["mig", "whole"],
    },
    {
        "slug": "research-training",
        "name": "Research training",
        "lead": "Two whole GPUs on NVLink peers for a thesis training run (up to 8 h).",
        "image": STUDIO_IMAGE,
        "software": ["pytorch", "jupyter"],
        "cpus": 4,
        "memory_mb": 16384,
        "gpu_count": 2,
        "gpu_memory_min_mb": 40000,
        "allowed_kinds": ["whole"],
        "max_duration_minutes": 480,
    },
    {
        "slug": "cpu-desktop",
        "name": "CPU-only desktop",
        "lead": "A Linux desktop without a GPU, for notes, code and small jobs.",
        "image": DESKTOP_IMAGE,
        "software": ["terminal"],
        "cpus": 1,
        "memory_mb": 2048,
        "gpu_count": 0,
        "gpu_memory_min_mb": 0,
        "allowed_kinds": [],
    },
]


def profile_fields(
    spec: dict[str, Any], image: str | None = None, gpu_image: str = STUDIO_IMAGE
) -> dict[str, Any]:
    """A profile's model fields: its image (``image`` for all, else ``gpu_image`` for a GPU
    profile of the studio), and a description that names only the programs of that image
    ("pytorch" names whichever PyTorch build the image holds)."""
    fields = {k: v for k, v in spec.items() if k not in ("lead", "software")}
    on_gpu = spec["gpu_count"] > 0 and spec["image"] == STUDIO_IMAGE
    fields["image"] = image or (gpu_image if on_gpu else spec["image"])
    programs = programs_of(fields["image"])
    held = [
        key
        for wanted in spec["software"]
        for key in programs
        if key == wanted or key.startswith(wanted + "-")
    ]
    fields["description"] = spec["lead"] + (f" With {named(held)}." if held else "")
    return fields


USERS: list[tuple[str, dict[str, object]]] = [
    ("student1", {"first_name": "Ada"}),
    ("student2", {"first_name": "Ben"}),
    ("instructor1", {"first_name": "Ines"}),
    ("ta1", {"first_name": "Tao"}),
    ("admin", {"first_name": "Ari", "is_staff": True, "is_superuser": True}),
]
# Who is what on campus (Member.role, student id); admins are staff.
MEMBERS: dict[str, dict[str, str]] = {
    "student1": {"role": Role.STUDENT, "student_id": "2026001"},
    "student2": {"role": Role.STUDENT, "student_id": "2026002"},
    "ta1": {"role": Role.STUDENT, "student_id": "2025042"},
    "instructor1": {"role": Role.FACULTY},
}
# student1 writes a thesis advised by instructor1, who granted thesis status for a term.
THESIS_DAYS = 120


class Command(BaseCommand):
    help = "Create the demo accounts (password DEMO_PASSWORD or 'deskpool'), course and profiles."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--image", default=None, help="One image for every profile (default: each its own)."
        )
        parser.add_argument(
            "--gpu-image",
            default=STUDIO_IMAGE,
            help=f"The GPU profiles' image: {STUDIO_CUDA_IMAGE} (PyTorch's CUDA build) where "
            f"it is built (build.sh studio-cuda), else {STUDIO_IMAGE} (its CPU build).",
        )

    @transaction.atomic
    def handle(self, *args, image: str | None, gpu_image: str, **options) -> None:
        password = os.environ.get("DEMO_PASSWORD") or "deskpool"
        users = {}
        user_model = get_user_model()
        for username, fields in USERS:
            user, _ = user_model.objects.update_or_create(username=username, defaults=fields)
            user.set_password(password)
            user.save()
            users[username] = user
        course, _ = Course.objects.update_or_create(
            code="cs-gpu101",
            defaults={"title": "GPU computing for everyone", "department": "computer-science"},
        )
        for username, member in MEMBERS.items():
            Member.objects.update_or_create(
                user=users[username], defaults={"department": "computer-science", **member}
            )
        PoolPolicy.current()
        for quota in QUOTAS:
            Quota.objects.update_or_create(scope=quota["scope"], key=quota["key"], defaults=quota)
        course.instructors.set([users["instructor1"]])
        course.students.set([users["student1"], users["student2"]])
        for spec in PROFILES:
            DesktopProfile.objects.update_or_create(
                slug=spec["slug"], defaults=profile_fields(spec, image, gpu_image)
            )
        set_default_profile(course, DesktopProfile.objects.get(slug="ai-painting"))
        teacher = users["instructor1"]
        do_set_ta(teacher, course, check_ta(course, "ta1", set(TA_PERMISSIONS)))
        if active_thesis_grant(users["student1"]) is None:
            until = timezone.localdate() + timedelta(days=THESIS_DAYS)
            do_grant(teacher, check_grant(teacher, "student1", until, "demo thesis"))
        used = sorted(
            set(
                DesktopProfile.objects.filter(slug__in=[p["slug"] for p in PROFILES]).values_list(
                    "image", flat=True
                )
            )
        )
        self.stdout.write(
            f"Demo accounts: {', '.join(u for u, _ in USERS)} (password from DEMO_PASSWORD, "
            f"or 'deskpool'); {len(PROFILES)} desktop profiles using {', '.join(used)}."
        )
        for held in used:
            build = IMAGE_TORCH.get(held)
            if build == "cpu":
                self.stdout.write(
                    f"{held} holds PyTorch's CPU build: its GPU desktops compute on the CPU. "
                    f"Build {STUDIO_CUDA_IMAGE} (bash nodeagent/images/build.sh studio-cuda) "
                    f"and seed with --gpu-image {STUDIO_CUDA_IMAGE}."
                )
            elif build == "cuda":
                self.stdout.write(f"{held} holds PyTorch's CUDA build: it computes on the GPU.")
