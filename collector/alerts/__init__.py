"""Alert rules of the loaded task profiles, evaluated as the windows update and delivered to a webhook."""
