from django.urls import path

from portal.live.class_consumers import ClassConsumer
from portal.live.consumers import UpdatesConsumer

websocket_urlpatterns = [
    path("ws/updates/", UpdatesConsumer.as_asgi()),
    path("ws/courses/<slug:code>/", ClassConsumer.as_asgi()),
]
