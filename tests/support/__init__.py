"""Shared test helpers: journal writers, fake NVML, SSH servers, record builders."""
