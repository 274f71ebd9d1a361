"""The fleet: workers on many machines claim loops from one registry, work on each loop's
repository in a private git workspace, and push the loop's branch after every iteration."""
