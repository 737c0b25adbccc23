"""The app's HTTP routes, one module per group; each adds its routes to the app that :func:`~anydev.serving.app.create_app` makes."""
