"""The app's HTTP routes, one module per group, each adding its routes to the app (see ``create_app``)."""
