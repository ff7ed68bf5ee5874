"""The student's face: home, a session, the desktop page, history, Try again."""
