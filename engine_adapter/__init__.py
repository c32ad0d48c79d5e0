"""Threadline's engine adapter: everything that touches Postgres and Absurd. Never imports panel."""
