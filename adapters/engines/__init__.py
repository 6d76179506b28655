"""One module per engine family: each adapter class declares everything about its engine."""
