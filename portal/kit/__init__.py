"""What the faces share: the signed-in person, the form base, confirmations, the one
rendering of a session, the navigation. Imports no face."""
