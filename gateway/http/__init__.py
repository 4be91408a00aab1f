"""The top of the gateway: what a worker is made of (`assembly.py`), the routes outside BentoML's (GET, admin, Files
and Batches), the middleware (`guard.py`, and each path's error shape: `errors.py`) and the OpenAPI document. Nothing
else in gateway/ imports it; service.py does."""
