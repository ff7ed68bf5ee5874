from django.urls import path

from portal.live.class_consumers import ClassConsumer
from portal.live.consumers import DesktopAudioConsumer, DesktopProxyConsumer, UpdatesConsumer

websocket_urlpatterns = [
    path("ws/updates/", UpdatesConsumer.as_asgi()),
    path("ws/desktop/<int:session_id>/", DesktopProxyConsumer.as_asgi()),
    path("ws/desktop/<int:session_id>/audio/", DesktopAudioConsumer.as_asgi()),
    path("ws/courses/<slug:code>/", ClassConsumer.as_asgi()),
]
