"""The memory console's static page (index.html, console.js, console.css), shipped as package
data and served by app/api/console_routes.py: no build step, nothing loaded from elsewhere."""
