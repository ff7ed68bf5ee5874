"""The live face over Channels: updates for a person's pages, the live class and the
desktop relay, with the checks every socket passes (origin, sign-in, input limits)."""
