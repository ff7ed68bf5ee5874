"""People and courses, the bottom of the project: who is on campus, the courses they
teach and take, thesis grants and API tokens. Imports nothing from portal or scheduling."""
