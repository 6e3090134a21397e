"""The kopf operator: handlers wire watch events to reconcile passes over a watch-fed store."""
