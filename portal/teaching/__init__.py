"""The teaching face: course pages (roster, TAs, settings, the live class), lab bookings,
thesis grants and quota requests."""
