"""`make image-test`: the serve-cpu image built from the Dockerfile and run as the Deployment runs it.

Entry point: ``scripts/deploy/image_test.py``. One module per job: ``host`` (Debian packages, podman's
configuration), ``base`` (the test-only stand-in for the base image), ``build``, ``pod`` (the Deployment's
runtime settings, read from the rendered manifests), ``container`` (podman run with those settings),
``checks`` (what is asked of the running container: probes, the APIs), ``stress`` (memory under load
against the limit, the drain), ``breakage`` (the self-check with a broken Dockerfile).
"""
