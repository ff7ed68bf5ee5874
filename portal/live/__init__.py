"""The live face over Channels: updates for a person's pages and the live class, with the
checks every socket passes (origin, sign-in, input limits). A desktop's screen and sound do
not pass here: the page opens them at the node's gateway with a ticket."""
